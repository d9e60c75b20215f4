# Port of the TensorFlow 2 "Transformer model for language understanding" tutorial
# (Keras subclassing API) to PyTorch. I kept the Keras names on purpose
# (Dense, kernel, units, layernorm1, ...) so I can read both side by side.
import math

import numpy as np
import torch
import torch.nn as nn


class Dense(nn.Module):
    """tf.keras.layers.Dense: y = x @ kernel + bias"""

    def __init__(self, in_dim, units, activation=None):
        super().__init__()
        limit = math.sqrt(6.0 / (in_dim + units))  # glorot_uniform like keras
        self.kernel = nn.Parameter(torch.randn(in_dim, units).uniform_(-limit, limit))
        self.bias = nn.Parameter(torch.zeros(units))
        self.activation = activation

    def forward(self, x):
        y = x @ self.kernel + self.bias
        if self.activation == "relu":
            y = torch.relu(y)
        return y


def get_angles(pos, i, d_model):
    angle_rates = 1 / np.power(10000, (2 * (i // 2)) / np.float32(d_model))
    return pos * angle_rates


def positional_encoding(position, d_model):
    angle_rads = get_angles(np.arange(position)[:, np.newaxis],
                            np.arange(d_model)[np.newaxis, :],
                            d_model)
    # apply sin to even indices in the array; 2i
    angle_rads[:, 0::2] = np.sin(angle_rads[:, 0::2])
    # apply cos to odd indices in the array; 2i+1
    angle_rads[:, 1::2] = np.cos(angle_rads[:, 1::2])
    pos_encoding = angle_rads[np.newaxis, ...]
    return torch.tensor(pos_encoding, dtype=torch.float32)


def create_padding_mask(seq):
    # 1 where the token is padding (id 0), 0 elsewhere
    seq = (seq == 0).float()
    # add extra dimensions to add the padding to the attention logits
    return seq[:, None, None, :]  # (batch_size, 1, 1, seq_len)


def scaled_dot_product_attention(q, k, v, mask):
    matmul_qk = q @ k.transpose(-2, -1)  # (..., seq_len_q, seq_len_k)
    # scale matmul_qk
    dk = float(k.shape[-1])
    scaled_attention_logits = matmul_qk / math.sqrt(dk)
    # add the mask to the scaled tensor.
    if mask is not None:
        scaled_attention_logits += (mask * -1e9)
    attention_weights = torch.softmax(scaled_attention_logits, dim=-1)
    output = attention_weights @ v  # (..., seq_len_q, depth_v)
    return output, attention_weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.d_model = d_model
        assert d_model % self.num_heads == 0
        self.depth = d_model // self.num_heads
        self.wq = Dense(d_model, d_model)
        self.wk = Dense(d_model, d_model)
        self.wv = Dense(d_model, d_model)
        self.dense = Dense(d_model, d_model)

    def split_heads(self, x, batch_size):
        """Split the last dimension into (num_heads, depth).
        Transpose the result such that the shape is (batch_size, num_heads, seq_len, depth)
        """
        x = x.reshape(batch_size, -1, self.num_heads, self.depth)
        return x.permute(0, 2, 1, 3)

    def forward(self, v, k, q, mask):
        batch_size = q.shape[0]
        q = self.wq(q)  # (batch_size, seq_len, d_model)
        k = self.wk(k)
        v = self.wv(v)

        q = self.split_heads(q, batch_size)  # (batch_size, num_heads, seq_len_q, depth)
        k = self.split_heads(k, batch_size)
        v = self.split_heads(v, batch_size)

        scaled_attention, attention_weights = scaled_dot_product_attention(q, k, v, mask)
        scaled_attention = scaled_attention.permute(0, 2, 1, 3)  # (batch_size, seq_len_q, num_heads, depth)
        concat_attention = scaled_attention.reshape(batch_size, -1, self.d_model)
        output = self.dense(concat_attention)  # (batch_size, seq_len_q, d_model)
        return output, attention_weights


def point_wise_feed_forward_network(d_model, dff):
    return nn.Sequential(
        Dense(d_model, dff, activation="relu"),  # (batch_size, seq_len, dff)
        Dense(dff, d_model),  # (batch_size, seq_len, d_model)
    )


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, dff, rate=0.1):
        super().__init__()
        self.mha = MultiHeadAttention(d_model, num_heads)
        self.ffn = point_wise_feed_forward_network(d_model, dff)
        self.layernorm1 = nn.LayerNorm(d_model, eps=1e-6)
        self.layernorm2 = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout1 = nn.Dropout(rate)
        self.dropout2 = nn.Dropout(rate)

    def forward(self, x, mask):
        attn_output, _ = self.mha(x, x, x, mask)  # (batch_size, input_seq_len, d_model)
        attn_output = self.dropout1(attn_output)
        out1 = self.layernorm1(x + attn_output)  # (batch_size, input_seq_len, d_model)

        ffn_output = self.ffn(out1)  # (batch_size, input_seq_len, d_model)
        ffn_output = self.dropout2(ffn_output)
        out2 = self.layernorm2(ffn_output)  # (batch_size, input_seq_len, d_model)
        return out2


class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, dff, input_vocab_size,
                 maximum_position_encoding, rate=0.1):
        super().__init__()
        self.d_model = d_model
        self.num_layers = num_layers
        self.embedding = nn.Embedding(input_vocab_size, d_model)
        self.register_buffer("pos_encoding", positional_encoding(maximum_position_encoding, self.d_model))
        self.enc_layers = nn.ModuleList([EncoderLayer(d_model, num_heads, dff, rate)
                                         for _ in range(num_layers)])
        self.dropout = nn.Dropout(rate)

    def forward(self, x, mask):
        seq_len = x.shape[1]
        # adding embedding and position encoding.
        x = self.embedding(x)  # (batch_size, input_seq_len, d_model)
        x = x * math.sqrt(self.d_model)
        x = x + self.pos_encoding[:, :seq_len, :]
        x = self.dropout(x)
        for i in range(self.num_layers):
            x = self.enc_layers[i](x, mask)
        return x  # (batch_size, input_seq_len, d_model)


if __name__ == "__main__":
    torch.manual_seed(0)
    sample_encoder = Encoder(num_layers=2, d_model=32, num_heads=4, dff=64,
                             input_vocab_size=90, maximum_position_encoding=50)
    sample_encoder.eval()
    temp_input = torch.tensor([[7, 6, 2, 4, 9, 0, 0, 0],
                               [1, 2, 3, 4, 5, 6, 7, 8],
                               [12, 44, 3, 0, 0, 0, 0, 0]])
    enc_padding_mask = create_padding_mask(temp_input)
    with torch.no_grad():
        sample_encoder_output = sample_encoder(temp_input, mask=enc_padding_mask)
    print(sample_encoder_output.shape)  # (batch_size, input_seq_len, d_model)
    print(sample_encoder_output[0, :2, :5])
