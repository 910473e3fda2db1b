"""One import toolkit for both edit lanes (the codemods and the LLM's AST edits): gather
what a module imports, add an import where a person would, drop imports nothing uses."""

from .gather import ImportedName, gather_imports, module_imports, modules_named, under
from .place import add_imports
from .unused import ImportSpec, remove_unused_imports, unused_names

__all__ = [
    "ImportSpec",
    "ImportedName",
    "add_imports",
    "gather_imports",
    "module_imports",
    "modules_named",
    "remove_unused_imports",
    "under",
    "unused_names",
]
