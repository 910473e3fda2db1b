"""Sequence packing: documents of different lengths in one row, no padding tokens.

flash-attn's varlen kernels take the packed tokens plus ``cu_seqlens``, the cumulative
sequence lengths (int32, batch + 1 entries, starting at 0), and the longest length.
"""
import torch
import torch.nn.functional as F


def sample_documents(generator, n_docs, vocab_size, min_len=4, max_len=24):
    """Token sequences of random lengths; each repeats a short random motif (learnable)."""
    docs = []
    lengths = torch.randint(min_len, max_len + 1, (n_docs,), generator=generator)
    for n in lengths.tolist():
        motif = torch.randint(1, vocab_size, (3,), generator=generator)
        docs.append(motif.repeat(n // 3 + 1)[: n + 1])
    return docs


def pack(docs):
    """Next-token inputs and targets of every document, concatenated.

    Returns (inputs, targets, positions, cu_seqlens, max_seqlen): positions restart at 0
    in each document so that the position embedding does not leak across documents.
    """
    lengths = torch.tensor([len(d) - 1 for d in docs], dtype=torch.int32)
    inputs = torch.cat([d[:-1] for d in docs])
    targets = torch.cat([d[1:] for d in docs])
    positions = torch.cat([torch.arange(n) for n in lengths.tolist()])
    cu_seqlens = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    return inputs, targets, positions, cu_seqlens, int(lengths.max())
