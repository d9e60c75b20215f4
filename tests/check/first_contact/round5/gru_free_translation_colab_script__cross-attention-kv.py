#!/usr/bin/env python
# coding: utf-8

# # Seq2Seq without GRUs: a Transformer for toy translation
# Converted from Colab. Task: "translate" a sequence of digits into the reversed sequence shifted by +1.

# In[1]:


import math
import torch
import torch.nn as nn
import torch.nn.functional as F

device = "cpu"
torch.manual_seed(42)


# %%
# In[2]:


PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2
SRC_VOCAB = TGT_VOCAB = 20
EMB_SIZE = 32
NHEAD = 4
FFN_HID_DIM = 64
NUM_ENCODER_LAYERS = 2
NUM_DECODER_LAYERS = 2
MAX_LEN = 16


# %%
# In[3]:


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz), device=device)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
    return mask


def create_mask(src, tgt):
    tgt_seq_len = tgt.shape[1]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    src_padding_mask = (src == PAD_IDX)
    tgt_padding_mask = (tgt == PAD_IDX)
    return tgt_mask, src_padding_mask, tgt_padding_mask


# %%
# In[4]:


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size, dropout, maxlen=MAX_LEN):
        super().__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(0)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding)

    def forward(self, token_embedding):
        return self.dropout(token_embedding + self.pos_embedding[:, :token_embedding.size(1), :])


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, nhead, dropout=0.1):
        super().__init__()
        self.nhead = nhead
        self.d_k = d_model // nhead
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        B, Tq, D = query.shape
        Tk = key.shape[1]
        q = self.w_q(query).view(B, Tq, self.nhead, self.d_k).transpose(1, 2)
        k = self.w_k(key).view(B, Tk, self.nhead, self.d_k).transpose(1, 2)
        v = self.w_v(value).view(B, Tk, self.nhead, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if attn_mask is not None:
            scores = scores + attn_mask  # float mask, -inf above the diagonal
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float('-inf'))
        attn = F.softmax(scores, dim=-1)
        attn = self.dropout(attn)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(B, Tq, D)
        return self.w_o(out)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout)
        self.linear1 = nn.Linear(d_model, dim_ff)
        self.linear2 = nn.Linear(dim_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src, src_key_padding_mask=None):
        src = self.norm1(src + self.dropout(self.self_attn(src, src, src, key_padding_mask=src_key_padding_mask)))
        src = self.norm2(src + self.dropout(self.linear2(F.relu(self.linear1(src)))))
        return src


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout)
        self.cross_attn = MultiHeadAttention(d_model, nhead, dropout)
        self.linear1 = nn.Linear(d_model, dim_ff)
        self.linear2 = nn.Linear(dim_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tgt, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        tgt = self.norm1(tgt + self.dropout(self.self_attn(tgt, tgt, tgt, attn_mask=tgt_mask,
                                                           key_padding_mask=tgt_key_padding_mask)))
        tgt = self.norm2(tgt + self.dropout(self.cross_attn(tgt, tgt, tgt,
                                                            key_padding_mask=tgt_key_padding_mask)))
        tgt = self.norm3(tgt + self.dropout(self.linear2(F.relu(self.linear1(tgt)))))
        return tgt


class Seq2SeqTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_tok_emb = nn.Embedding(SRC_VOCAB, EMB_SIZE)
        self.tgt_tok_emb = nn.Embedding(TGT_VOCAB, EMB_SIZE)
        self.positional_encoding = PositionalEncoding(EMB_SIZE, dropout=0.1)
        self.encoder_layers = nn.ModuleList(
            [EncoderLayer(EMB_SIZE, NHEAD, FFN_HID_DIM) for _ in range(NUM_ENCODER_LAYERS)])
        self.decoder_layers = nn.ModuleList(
            [DecoderLayer(EMB_SIZE, NHEAD, FFN_HID_DIM) for _ in range(NUM_DECODER_LAYERS)])
        self.generator = nn.Linear(EMB_SIZE, TGT_VOCAB)

    def encode(self, src, src_padding_mask=None):
        x = self.positional_encoding(self.src_tok_emb(src) * math.sqrt(EMB_SIZE))
        for layer in self.encoder_layers:
            x = layer(x, src_key_padding_mask=src_padding_mask)
        return x

    def decode(self, tgt, memory, tgt_mask, tgt_padding_mask=None, memory_key_padding_mask=None):
        y = self.positional_encoding(self.tgt_tok_emb(tgt) * math.sqrt(EMB_SIZE))
        for layer in self.decoder_layers:
            y = layer(y, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask)
        return y

    def forward(self, src, tgt, tgt_mask, src_padding_mask, tgt_padding_mask):
        memory = self.encode(src, src_padding_mask)
        outs = self.decode(tgt, memory, tgt_mask, tgt_padding_mask, src_padding_mask)
        return self.generator(outs)


# %%
# In[5]:


def make_batch(batch_size=8):
    srcs, tgts = [], []
    for _ in range(batch_size):
        n = torch.randint(3, 8, (1,)).item()
        s = torch.randint(3, SRC_VOCAB - 1, (n,))
        t = (s.flip(0) + 1).clamp(max=TGT_VOCAB - 1)
        srcs.append(torch.cat([s, torch.tensor([EOS_IDX])]))
        tgts.append(torch.cat([torch.tensor([BOS_IDX]), t, torch.tensor([EOS_IDX])]))
    src = nn.utils.rnn.pad_sequence(srcs, batch_first=True, padding_value=PAD_IDX)
    tgt = nn.utils.rnn.pad_sequence(tgts, batch_first=True, padding_value=PAD_IDX)
    return src, tgt


model = Seq2SeqTransformer().to(device)
loss_fn = nn.CrossEntropyLoss(ignore_index=PAD_IDX)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)


# %%
# In[6]:


for epoch in range(1, 4):
    model.train()
    src, tgt = make_batch()
    tgt_input = tgt[:, :-1]
    tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
    logits = model(src, tgt_input, tgt_mask, src_padding_mask, tgt_padding_mask)
    tgt_out = tgt[:, 1:]
    loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"Epoch: {epoch}, Train loss: {loss.item():.3f}")


# %%
# In[7]:


def greedy_decode(model, src, max_len, start_symbol):
    src_padding_mask = (src == PAD_IDX)
    memory = model.encode(src, src_padding_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long)
    for i in range(max_len - 1):
        tgt_mask = generate_square_subsequent_mask(ys.size(1))
        out = model.decode(ys, memory, tgt_mask, memory_key_padding_mask=src_padding_mask)
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=1)
        if next_word == EOS_IDX:
            break
    return ys


model.eval()
src = torch.tensor([[5, 6, 7, 8, EOS_IDX]])
print("source:", src.tolist()[0])
print("greedy:", greedy_decode(model, src, max_len=8, start_symbol=BOS_IDX).tolist()[0])
