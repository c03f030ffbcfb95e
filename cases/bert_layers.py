"""A BERT pre-training model as the affinity-op guide trained it (docs/feature-docs.md#affinity-ops): the "Dive into
Deep Learning" (d2l) BERT.

The guide's code fragments are this model's: ``masked_softmax`` repeats ``valid_lens`` with
``torch.repeat_interleave(valid_lens, shape[1])`` and masks the scores with ``X[~mask] = value``
(an IndexPutV2 in the forward and again in the backward, in every attention layer), and the masked-LM
head gathers the predicted positions with ``X[batch_idx, pred_positions]`` (whose backward is an
accumulating IndexPutV2). The next-sentence head pools the tokens that were not masked, finding them
with the guide's ``one_hot(...).sum(dim=1)``. Linear layers are ``nn.Linear``. Dropout is 0: a modeled
step compares two runs bit for bit, and the seed's findings are about kernels, not regularisation.

:func:`bert` builds the model at a size, :func:`batch` a deterministic pre-training batch, and
:func:`bert_loss` d2l's loss (masked-LM cross entropy weighted by the real predictions, plus NSP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BertSize:
    vocab: int
    hidden: int
    ffn: int
    heads: int
    layers: int
    seq: int
    batch: int
    predictions: int


# d2l's pre-training configuration (chapter "Pretraining BERT": 2 layers, 128 hidden, 2 heads, ffn 256,
# WikiText-2's vocabulary, sequences of 64, 10 predictions each) with a smaller batch for a 2-core CPU.
D2L = BertSize(vocab=20256, hidden=128, ffn=256, heads=2, layers=2, seq=64, batch=64, predictions=10)
# BERT-base: the benchmark's size.
BASE = BertSize(vocab=30522, hidden=768, ffn=3072, heads=12, layers=12, seq=128, batch=8, predictions=20)


def sequence_mask(x: torch.Tensor, valid_len: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """d2l: mask the entries past each row's valid length, with boolean indexing (IndexPutV2)."""
    maxlen = x.size(1)
    mask = torch.arange(maxlen, dtype=torch.float32, device=x.device)[None, :] < valid_len[:, None]
    x[~mask] = value
    return x


def masked_softmax(x: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    """d2l: softmax over the last axis with the entries past ``valid_lens`` masked (the guide's lines)."""
    shape = x.shape
    valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    x = sequence_mask(x.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return F.softmax(x.reshape(shape), dim=-1)


def transpose_qkv(x: torch.Tensor, heads: int) -> torch.Tensor:
    x = x.reshape(x.shape[0], x.shape[1], heads, -1).permute(0, 2, 1, 3)
    return x.reshape(-1, x.shape[2], x.shape[3])


def transpose_output(x: torch.Tensor, heads: int) -> torch.Tensor:
    x = x.reshape(-1, heads, x.shape[1], x.shape[2]).permute(0, 2, 1, 3)
    return x.reshape(x.shape[0], x.shape[1], -1)


class MultiHeadAttention(nn.Module):
    def __init__(self, size: BertSize) -> None:
        super().__init__()
        self.heads = size.heads
        self.W_q = nn.Linear(size.hidden, size.hidden, bias=False)
        self.W_k = nn.Linear(size.hidden, size.hidden, bias=False)
        self.W_v = nn.Linear(size.hidden, size.hidden, bias=False)
        self.W_o = nn.Linear(size.hidden, size.hidden, bias=False)

    def forward(self, x: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
        queries = transpose_qkv(self.W_q(x), self.heads)
        keys = transpose_qkv(self.W_k(x), self.heads)
        values = transpose_qkv(self.W_v(x), self.heads)
        valid_lens = torch.repeat_interleave(valid_lens, repeats=self.heads, dim=0)
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(queries.shape[-1])
        output = torch.bmm(masked_softmax(scores, valid_lens), values)
        return self.W_o(transpose_output(output, self.heads))


class EncoderBlock(nn.Module):
    def __init__(self, size: BertSize) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(size)
        self.ln1 = nn.LayerNorm(size.hidden)
        self.dense1 = nn.Linear(size.hidden, size.ffn)
        self.dense2 = nn.Linear(size.ffn, size.hidden)
        self.ln2 = nn.LayerNorm(size.hidden)

    def forward(self, x: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
        y = self.ln1(x + self.attention(x, valid_lens))
        return self.ln2(y + self.dense2(F.relu(self.dense1(y))))


class BertModel(nn.Module):
    """Encoder, masked-LM head and next-sentence head (d2l's BERTModel)."""

    def __init__(self, size: BertSize) -> None:
        super().__init__()
        self.size = size
        self.token_embedding = nn.Embedding(size.vocab, size.hidden)
        self.segment_embedding = nn.Embedding(2, size.hidden)
        self.pos_embedding = nn.Parameter(torch.randn(1, size.seq, size.hidden) * 0.02)
        self.blks = nn.ModuleList(EncoderBlock(size) for _ in range(size.layers))
        self.mlm = nn.Sequential(
            nn.Linear(size.hidden, size.hidden), nn.ReLU(), nn.LayerNorm(size.hidden),
            nn.Linear(size.hidden, size.vocab),
        )
        self.hidden = nn.Sequential(nn.Linear(size.hidden, size.hidden), nn.Tanh())
        self.nsp = nn.Linear(size.hidden, 2)

    def forward(
        self, tokens: torch.Tensor, segments: torch.Tensor, valid_lens: torch.Tensor, pred_positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.token_embedding(tokens) + self.segment_embedding(segments) + self.pos_embedding
        for blk in self.blks:
            x = blk(x, valid_lens)
        batch, predictions = pred_positions.shape
        batch_idx = torch.repeat_interleave(torch.arange(batch), predictions)
        masked_x = x[batch_idx, pred_positions.reshape(-1)].reshape(batch, predictions, -1)
        mlm_y_hat = self.mlm(masked_x)
        # Pool the tokens that were not masked for prediction (the guide's one_hot + sum builds the mask).
        masked = F.one_hot(pred_positions, num_classes=x.shape[1]).sum(dim=1).clamp(max=1)
        keep = (1 - masked).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1)
        return mlm_y_hat, self.nsp(self.hidden(pooled))


def bert(size: BertSize, seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    return BertModel(size)


@dataclass(frozen=True)
class Batch:
    tokens: torch.Tensor
    segments: torch.Tensor
    valid_lens: torch.Tensor
    pred_positions: torch.Tensor
    mlm_weights: torch.Tensor
    mlm_labels: torch.Tensor
    nsp_labels: torch.Tensor

    @property
    def inputs(self) -> tuple[torch.Tensor, ...]:
        return self.tokens, self.segments, self.valid_lens, self.pred_positions


def batch(size: BertSize, seed: int = 1) -> Batch:
    """A deterministic pre-training batch: two segments per sequence, padding past ``valid_lens``,
    distinct predicted positions inside each sequence (the last few of them padding, weight 0)."""
    gen = torch.Generator().manual_seed(seed)
    b, s, p = size.batch, size.seq, size.predictions
    valid_lens = torch.randint(s // 2, s + 1, (b,), generator=gen)
    tokens = torch.randint(5, size.vocab, (b, s), generator=gen)
    segments = (torch.arange(s)[None, :] >= (valid_lens[:, None] // 2)).long()
    pred_positions = torch.rand(b, s // 2, generator=gen).argsort(-1)[:, :p] + 1
    mlm_weights = (torch.arange(p)[None, :] < p - 2).float().expand(b, p).contiguous()
    mlm_labels = torch.randint(5, size.vocab, (b, p), generator=gen)
    nsp_labels = torch.randint(0, 2, (b,), generator=gen)
    return Batch(tokens, segments, valid_lens.float(), pred_positions, mlm_weights, mlm_labels, nsp_labels)


def bert_loss(data: Batch):
    """d2l's pre-training loss of a batch: the masked-LM cross entropy over real predictions plus NSP."""

    def loss(outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        mlm_y_hat, nsp_y_hat = outputs
        vocab = mlm_y_hat.shape[-1]
        mlm_l = F.cross_entropy(mlm_y_hat.reshape(-1, vocab), data.mlm_labels.reshape(-1), reduction="none")
        mlm_l = (mlm_l * data.mlm_weights.reshape(-1)).sum() / (data.mlm_weights.sum() + 1e-8)
        return mlm_l + F.cross_entropy(nsp_y_hat, data.nsp_labels)

    return loss
