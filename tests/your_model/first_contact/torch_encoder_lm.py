"""
Causal (GPT-style) language model on top of PyTorch's nn.TransformerEncoder.

Adapted from the PyTorch tutorial "Language Modeling with nn.Transformer and
torchtext", but:
  * batch_first=True everywhere (inputs are [batch, seq]),
  * every constructor argument has a default, so `CausalTransformerLM()` just works,
  * the causal mask is built inside forward() if you don't pass one.
"""
import math

import torch
from torch import nn, Tensor


class PositionalEncoding(nn.Module):

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)

        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(1, max_len, d_model)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe)

    def forward(self, x: Tensor) -> Tensor:
        """
        Arguments:
            x: Tensor, shape ``[batch_size, seq_len, embedding_dim]``
        """
        x = x + self.pe[:, :x.size(1)]
        return self.dropout(x)


def generate_square_subsequent_mask(sz: int, device=None) -> Tensor:
    """Boolean mask, True above the diagonal = that (future) position may NOT be attended."""
    return torch.triu(torch.ones(sz, sz, dtype=torch.bool, device=device), diagonal=1)


class CausalTransformerLM(nn.Module):

    def __init__(self, vocab_size: int = 1000, d_model: int = 128, nhead: int = 4,
                 num_layers: int = 2, dim_feedforward: int = 256, dropout: float = 0.1,
                 max_len: int = 512):
        super().__init__()
        self.model_type = 'Transformer'
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoder = PositionalEncoding(d_model, dropout, max_len)
        encoder_layers = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
                                                    batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, num_layers)
        self.linear = nn.Linear(d_model, vocab_size)

        self.init_weights()

    def init_weights(self) -> None:
        initrange = 0.1
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.linear.bias.data.zero_()
        self.linear.weight.data.uniform_(-initrange, initrange)

    def forward(self, src: Tensor, src_mask: Tensor = None) -> Tensor:
        """
        Arguments:
            src: Tensor, shape ``[batch_size, seq_len]`` of token ids
            src_mask: Tensor, shape ``[seq_len, seq_len]`` (built causally when None)

        Returns:
            output Tensor of shape ``[batch_size, seq_len, vocab_size]``
        """
        if src_mask is None:
            src_mask = generate_square_subsequent_mask(src.size(1), src.device)
        src = self.embedding(src) * math.sqrt(self.d_model)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, src_mask)
        output = self.linear(output)
        return output


if __name__ == "__main__":
    model = CausalTransformerLM()
    model.eval()
    x = torch.randint(0, 1000, (2, 16))
    with torch.no_grad():
        logits = model(x)
    print(logits.shape)  # torch.Size([2, 16, 1000])
