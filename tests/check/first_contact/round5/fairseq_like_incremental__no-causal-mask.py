# Minimal fairseq-style Transformer decoder (Pre-LN, learned positions)
# with incremental decoding through an `incremental_state` dict.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, self_attention=False,
                 encoder_decoder_attention=False):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        assert self.head_dim * num_heads == embed_dim
        self.scaling = self.head_dim ** -0.5
        self.dropout = dropout
        self.self_attention = self_attention
        self.encoder_decoder_attention = encoder_decoder_attention
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        nn.init.xavier_uniform_(self.in_proj_weight)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None,
                incremental_state=None, layer_id=None):
        # query: (T, B, C) -- time first, like fairseq
        tgt_len, bsz, embed_dim = query.size()
        if self.self_attention:
            q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        else:
            w_q, w_kv = self.in_proj_weight.split([embed_dim, 2 * embed_dim])
            b_q, b_kv = self.in_proj_bias.split([embed_dim, 2 * embed_dim])
            q = F.linear(query, w_q, b_q)
            k, v = F.linear(key, w_kv, b_kv).chunk(2, dim=-1)
        q = q * self.scaling

        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)

        if incremental_state is not None and self.self_attention:
            saved = incremental_state.get(layer_id)
            if saved is not None:
                k = torch.cat([saved["prev_key"], k], dim=1)
                v = torch.cat([saved["prev_value"], v], dim=1)
                if key_padding_mask is not None and saved["prev_key_padding_mask"] is not None:
                    pass  # the full padding mask is passed in every step
            incremental_state[layer_id] = {"prev_key": k, "prev_value": v,
                                           "prev_key_padding_mask": key_padding_mask}

        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))  # (B*H, T, S)

        if attn_mask is not None:
            attn_weights = attn_weights + attn_mask.unsqueeze(0)
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(
                key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)

        attn_probs = F.softmax(attn_weights, dim=-1)
        attn_probs = F.dropout(attn_probs, p=self.dropout, training=self.training)
        attn = torch.bmm(attn_probs, v)  # (B*H, T, hd)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, args, layer_id):
        super().__init__()
        self.layer_id = layer_id
        self.embed_dim = args["decoder_embed_dim"]
        self.self_attn = MultiheadAttention(self.embed_dim, args["decoder_attention_heads"],
                                            dropout=args["attention_dropout"], self_attention=True)
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.fc1 = nn.Linear(self.embed_dim, args["decoder_ffn_embed_dim"])
        self.fc2 = nn.Linear(args["decoder_ffn_embed_dim"], self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)
        self.dropout = args["dropout"]

    def forward(self, x, self_attn_mask=None, self_attn_padding_mask=None, incremental_state=None):
        residual = x
        x = self.self_attn_layer_norm(x)
        x = self.self_attn(x, x, x, key_padding_mask=self_attn_padding_mask,
                           attn_mask=self_attn_mask, incremental_state=incremental_state,
                           layer_id=self.layer_id)
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = residual + x

        residual = x
        x = self.final_layer_norm(x)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = residual + x
        return x


class TransformerDecoder(nn.Module):
    def __init__(self, args, vocab_size, padding_idx):
        super().__init__()
        self.padding_idx = padding_idx
        d = args["decoder_embed_dim"]
        self.embed_scale = math.sqrt(d)
        self.embed_tokens = nn.Embedding(vocab_size, d, padding_idx=padding_idx)
        self.embed_positions = nn.Embedding(args["max_target_positions"], d)
        self.layers = nn.ModuleList(
            [TransformerDecoderLayer(args, i) for i in range(args["decoder_layers"])])
        self.layer_norm = nn.LayerNorm(d)
        self.output_projection = nn.Linear(d, vocab_size, bias=False)
        self.dropout = args["dropout"]

    def buffered_future_mask(self, tensor):
        dim = tensor.size(0)
        return torch.triu(torch.full((dim, dim), float("-inf")), 2)

    def forward(self, prev_output_tokens, incremental_state=None):
        bsz, seqlen = prev_output_tokens.size()
        positions = torch.arange(seqlen, device=prev_output_tokens.device).unsqueeze(0)
        padding_mask = prev_output_tokens.eq(self.padding_idx)
        if incremental_state is not None:
            # only the last token is fed, its position is seqlen - 1
            prev_output_tokens = prev_output_tokens[:, -1:]
            positions = positions[:, -1:]

        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        x = x + self.embed_positions(positions)
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        self_attn_mask = None
        if incremental_state is None:
            self_attn_mask = self.buffered_future_mask(x)

        for layer in self.layers:
            x = layer(x, self_attn_mask=self_attn_mask, self_attn_padding_mask=padding_mask,
                      incremental_state=incremental_state)

        x = self.layer_norm(x)
        x = x.transpose(0, 1)
        return self.output_projection(x)


args = {
    "decoder_embed_dim": 32,
    "decoder_attention_heads": 4,
    "decoder_ffn_embed_dim": 64,
    "decoder_layers": 2,
    "max_target_positions": 16,
    "dropout": 0.1,
    "attention_dropout": 0.1,
}


if __name__ == "__main__":
    torch.manual_seed(0)
    PAD = 1
    model = TransformerDecoder(args, vocab_size=40, padding_idx=PAD)
    model.eval()
    tokens = torch.randint(2, 40, (2, 7))
    tokens[1, 5:] = PAD  # right padding on the second sentence
    with torch.no_grad():
        full = model(tokens)
        print("full forward:", full.shape)

        # incremental decoding on the first (unpadded) sentence
        state = {}
        steps = []
        for t in range(1, 8):
            steps.append(model(tokens[:1, :t], incremental_state=state))
        inc = torch.cat(steps, dim=1)
        print("incremental matches full:", torch.allclose(inc, full[:1], atol=1e-5))
