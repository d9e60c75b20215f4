"""LSTM encoder-decoder with additive attention: the recurrent translator (`model.kind: "lstm"`).

The model of Bahdanau et al. (2015) as d2l builds it (chapter 11.4), beside `Seq2Seq`:

    memory = [LSTM_fwd(x) ; LSTM_bwd(x)]                  bidirectional encoder, d_model/2 units
                                                         each way: memory (B, S, C) like the
                                                         Transformer encoder's
    s_0    = tanh(W_init · mean_real(memory)), c_0 = 0   the decoder starts from the source
    c_t    = AdditiveAttention(q = s_{t-1}, K = V = memory, mask = real source tokens)
    s_t    = LSTM_dec([embed(y_{t-1}) ; c_t], s_{t-1})    the context is fed into the recurrence
    logits = out_proj(Dropout(s_t))                       (tied to the target embedding by default)
    # 双向 LSTM 编码器；解码器每一步以上一步的隐藏状态为查询做加性注意力，把上下文向量与词向量拼接后送入 LSTM

Sizes come from `model.transformer` (d_model, n_layers = encoder layers, n_decoder_layers,
dropout; heads and d_ff are not used), so one recipe switches models with `--set model.kind=lstm`.
The decoder is sequential by construction (each step's query is the previous step's state), in
training as in decoding: that is the cost the Transformer removes, and what
`experiment transformer-vs-lstm` measures.

Decoding goes through the same search as the Transformer (`tasks/translate/decoding.py`): the
`cache` of `decode` is an `LSTMDecoderState` (h and c of every layer and the memory's projected
keys) in place of a KV cache; `reorder(index)` keeps beams and drops finished sentences.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..data.bigrams import id_bigrams_batch
from ..errors import UserError
from ..nn import AdditiveAttention, Linear
from .embedding import Embeddings, token_dropout

NO_ATTENTION = ("an LSTM translator has no self-attention: `attention` and `doctor` need a Transformer run "
                "(model.kind=transformer); `align RUN TEXT` draws its additive cross-attention")
LEAN_REASON = "an LSTM decoder steps through its decode: its state is (h, c) per layer, not a KV cache"


class LSTMDecoderState:
    """What the LSTM decoder carries from one step to the next (the place of a `DecoderCache`):
    h, c `(L, N, C)` of every decoder layer, the memory's projected attention keys `(N, S, C)`
    (computed on the first step, as the Transformer caches the cross-attention K/V), and the
    number of target positions fed so far."""

    def __init__(self):
        self.h: torch.Tensor | None = None
        self.c: torch.Tensor | None = None
        self.keys: torch.Tensor | None = None
        self.length = 0

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (beam reordering, finished sentences leaving)."""
        if self.h is not None:
            self.h, self.c = self.h.index_select(1, index), self.c.index_select(1, index)
            self.keys = self.keys.index_select(0, index)


class LSTMSeq2Seq(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        tc = cfg.transformer.replace(position="none")  # a recurrence knows the order by itself
        d, self.src_pad_id = tc.d_model, cfg.src_pad_id
        self.src_embed = Embeddings(cfg.src_vocab_size, tc, bigram_buckets=cfg.src_bigram_buckets)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else Embeddings(cfg.tgt_vocab_size, tc)
        # dropout between stacked layers only (torch warns when it is set with one layer)
        between = lambda n: tc.dropout if n > 1 else 0.0  # noqa: E731
        self.encoder = nn.LSTM(d, d // 2, num_layers=tc.n_layers, batch_first=True, bidirectional=True,
                               dropout=between(tc.n_layers))
        self.init_state = Linear(d, d)
        self.attention = AdditiveAttention(d, d, d)
        self.decoder = nn.LSTM(2 * d, d, num_layers=tc.decoder_layers, batch_first=True,
                               dropout=between(tc.decoder_layers))
        self.dropout = nn.Dropout(tc.dropout)
        self.out_proj = Linear(d, cfg.tgt_vocab_size, bias=False)
        if cfg.tie_output:
            self.out_proj.weight = self.tgt_embed.tokens.weight  # (V, C) both
        else:
            nn.init.normal_(self.out_proj.weight, std=d ** -0.5)

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        if enabled:
            raise UserError("gradient checkpointing is for the Transformer's layers; an LSTM translator "
                            "cannot use it: set train.grad_checkpointing=false")

    def lean_blocker(self) -> str | None:
        """Why the lean decode step cannot serve this model (the search then steps `decode`)."""
        return LEAN_REASON

    def new_cache(self, capacity: int | None = None) -> LSTMDecoderState:
        return LSTMDecoderState()  # grows nothing: `capacity` is for a KV cache

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src `(B, S)` ids -> memory `(B, S, C)` (zeros at padding) and its mask `(B, S)` (True = real).
        Padding is packed away, so the backward direction starts at each row's last real token and
        a row's memory does not depend on its batch-mates' lengths."""
        src_mask = src != self.src_pad_id
        bigrams = id_bigrams_batch(src, self.cfg.src_bigram_buckets) if self.cfg.src_bigram_buckets else None
        x = self.src_embed(src, bigrams)  # (B, S, C)
        lengths = src_mask.sum(1).clamp(min=1).cpu()  # an all-padding row: length 1, masked everywhere after
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        memory, _ = pad_packed_sequence(self.encoder(packed)[0], batch_first=True, total_length=src.shape[1])
        return memory * src_mask[..., None], src_mask  # (B, S, C)

    def start(self, memory: torch.Tensor, src_mask: torch.Tensor, state: LSTMDecoderState) -> None:
        """s_0 = tanh(W_init · mean of the real memory rows) in every layer, c_0 = 0; the keys once."""
        n = src_mask.sum(1, keepdim=True).clamp(min=1).to(memory.dtype)  # (B, 1)
        s0 = torch.tanh(self.init_state(memory.sum(1) / n))  # (B, C)
        layers = self.decoder.num_layers
        state.h = s0[None].expand(layers, -1, -1).contiguous()  # (L, B, C)
        state.c = torch.zeros_like(state.h)
        state.keys = self.attention.project_keys(memory)  # (B, S, C)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor,
               cache: LSTMDecoderState | None = None, need_weights: bool = False):
        """tgt `(B, T)` ids (the new positions only when `cache` is given) -> logits `(B, T, V)`
        (and `[(None, cross_w (B, 1, T, S))]` with `need_weights`: one layer of attention, one
        head, no self-attention)."""
        state = cache if cache is not None else LSTMDecoderState()
        if state.h is None:
            self.start(memory, src_mask, state)
        x = self.tgt_embed(tgt)  # (B, T, C)
        h, c = state.h, state.c
        outs, weights = [], []
        for t in range(tgt.shape[1]):  # sequential: step t's query is step t-1's state
            ctx, w = self.attention(h[-1][:, None], memory, memory, padding_mask=src_mask,
                                    projected_keys=state.keys)  # (B, 1, C), (B, 1, S)
            out, (h, c) = self.decoder(torch.cat([x[:, t:t + 1], ctx], -1), (h, c))  # (B, 1, C)
            outs.append(out)
            weights.append(w)
        state.h, state.c, state.length = h, c, state.length + tgt.shape[1]
        logits = self.out_proj(self.dropout(torch.cat(outs, 1)))  # (B, T, V)
        if need_weights:
            return logits, [(None, torch.cat(weights, 1)[:, None])]  # (B, 1 head, T, S)
        return logits

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src `(B, S)`, tgt_in `(B, T)` = <bos> y_1 .. y_{T-1} -> `(B, T, V)`."""
        if self.training:
            src, _ = token_dropout(src, self.cfg.src_token_dropout)
            tgt_in, _ = token_dropout(tgt_in, self.cfg.tgt_token_dropout)
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)
