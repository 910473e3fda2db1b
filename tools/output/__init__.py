"""Where a migration is written, and how, so that nothing outside it is ever touched.

``destination`` decides whether a folder may receive an output (never the source,
inside it or above it; only an empty folder or torchport's earlier output of the
same source); ``marker`` records what torchport wrote there; ``staged`` builds a
new output beside the old one and swaps it in; ``in_place`` backs up and rewrites
files of the repository itself; ``branch`` commits without a checkout;
``nofollow`` is the one way all of them write, never through a symlink.
"""
