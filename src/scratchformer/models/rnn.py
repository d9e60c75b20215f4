"""LSTM classifier: the recurrent baseline the Transformer is compared with (`model.kind: "lstm"`).

Same input and output as `EncoderClassifier`, only the middle differs:

    x   = Embeddings(ids)                         token (+ bigram) embeddings, no positions:
                                                  a recurrence knows the order by itself
    h_t = [LSTM_fwd(x_1..x_t) ; LSTM_bwd(x_t..x_n)]   bidirectional, d_model/2 units each way,
                                                  so h_t has d_model features like the encoder's
    v   = mean of h_t over the real tokens        (or max / position 0, as `model.pooling`)
    logits = Linear(Dropout(v))                   the same head

双向 LSTM：前向与后向各 d_model/2 维，拼接后对真实 token 取平均，再接同样的分类头。

The sizes come from `model.encoder` (d_model, n_layers, dropout between layers), so one recipe
switches between the two with `--set model.kind=lstm`. Padded positions are packed away
(`pack_padded_sequence`): the backward direction starts at each row's last real token, not
at the padding, so a row's output does not depend on how long its batch-mates are.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..errors import UserError
from ..nn import Linear
from .embedding import Embeddings, token_dropout
from .pooling import masked_pool, pool_segments

NO_ATTENTION = "an LSTM has no attention: attention maps and the attention checks of `doctor` need a Transformer run (model.kind=transformer)"


class LSTMClassifier(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        enc = cfg.encoder
        self.cfg = cfg
        self.embed = Embeddings(cfg.vocab_size, enc.replace(position="none"), cfg.bigram_buckets)
        # dropout between stacked layers only (torch warns when it is set with one layer)
        self.lstm = nn.LSTM(enc.d_model, enc.d_model // 2, num_layers=enc.n_layers, batch_first=True,
                            bidirectional=True, dropout=enc.dropout if enc.n_layers > 1 else 0.0)
        self.head = nn.Sequential(nn.Dropout(cfg.head_dropout), Linear(enc.d_model, cfg.n_classes))

    def backbone(self) -> list[nn.Module]:
        return [self.embed, self.lstm]

    def set_encoder_lr_scale(self, scale: float) -> None:
        for module in self.backbone():
            for p in module.parameters():
                p.lr_scale = scale

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        if enabled:
            raise UserError("gradient checkpointing is for the Transformer's layers; an LSTM run "
                            "cannot use it: set train.grad_checkpointing=false")

    def features(self, ids: torch.Tensor, bigrams: torch.Tensor | None = None, need_weights: bool = False):
        """ids `(S, T)` -> pooled `(S, C)`."""
        if need_weights:
            raise UserError(NO_ATTENTION)
        mask = ids != 0  # (S, T), <pad> = 0
        if self.training and self.cfg.token_dropout > 0:
            ids, bigrams = token_dropout(ids, self.cfg.token_dropout, bigrams)
        x = self.embed(ids, bigrams)  # (S, T, C)
        # an all-padding row gets length 1; pooling masks it out (zeros), as for the encoder
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        h, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=ids.shape[1])  # (S, T, C)
        return masked_pool(h, mask, self.cfg.pooling)

    def forward(self, ids: torch.Tensor, bigrams: torch.Tensor | None = None,
                doc_index: torch.Tensor | None = None, n_docs: int | None = None) -> torch.Tensor:
        """ids `(S, T)` segments -> logits `(n_docs, n_classes)`, as `EncoderClassifier.forward`."""
        seg = self.features(ids, bigrams)  # (S, C)
        if doc_index is not None:
            seg = pool_segments(seg, doc_index, n_docs, self.cfg.segment_pooling)  # (n_docs, C)
        return self.head(seg)
