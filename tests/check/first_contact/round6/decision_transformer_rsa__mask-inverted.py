"""
Decision Transformer (Chen et al., 2021), minimal re-write without HuggingFace.

Each timestep t contributes three tokens  (R_t, s_t, a_t)  -> sequence R_1 s_1 a_1 R_2 s_2 a_2 ...
A GPT-2 style causal transformer runs over the 3K tokens and the action a_t is predicted from
the hidden state of the *state* token s_t (it may only see R_<=t, s_<=t, a_<t).

Like the official code, short trajectories are LEFT-padded to the context length K and an
attention_mask (1 = real timestep, 0 = padding) is passed in, expanded to the 3 tokens per step.

GPT-2 details kept: fused c_attn, pre-LN blocks, ln_f at the end, GELU MLP
(config activation_function = "gelu"), causal mask as a registered tril buffer,
additive attention mask (1 - mask) * -10000.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DTConfig:
    state_dim: int = 11
    act_dim: int = 3
    hidden_size: int = 128
    n_layer: int = 3
    n_head: int = 1
    n_inner: int = 512
    max_length: int = 20  # K, timesteps of context
    max_ep_len: int = 1000
    activation_function: str = "gelu"
    resid_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        n_pos = 3 * cfg.max_length
        self.register_buffer("bias", torch.tril(torch.ones(n_pos, n_pos, dtype=torch.bool)).view(1, 1, n_pos, n_pos))
        self.n_head = cfg.n_head
        self.head_dim = cfg.hidden_size // cfg.n_head
        self.c_attn = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.c_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attn_dropout = nn.Dropout(cfg.attn_pdrop)
        self.resid_dropout = nn.Dropout(cfg.resid_pdrop)

    def _split_heads(self, x):
        b, t, _ = x.size()
        return x.view(b, t, self.n_head, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, attention_mask=None):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)

        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        causal = self.bias[:, :, :t, :t]
        w = torch.where(causal, w, torch.tensor(-1e4, dtype=w.dtype))
        if attention_mask is not None:
            w = w + attention_mask  # already (B, 1, 1, T) and additive
        w = F.softmax(w, dim=-1)
        w = self.attn_dropout(w)

        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(a))


class MLP(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.hidden_size, cfg.n_inner)
        self.act = nn.GELU()  # activation_function == "gelu"
        self.c_proj = nn.Linear(cfg.n_inner, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.resid_pdrop)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)

    def forward(self, x, attention_mask=None):
        x = x + self.attn(self.ln_1(x), attention_mask)
        x = x + self.mlp(self.ln_2(x))
        return x


class DecisionTransformer(nn.Module):
    def __init__(self, cfg: DTConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.embed_timestep = nn.Embedding(cfg.max_ep_len, h)
        self.embed_return = nn.Linear(1, h)
        self.embed_state = nn.Linear(cfg.state_dim, h)
        self.embed_action = nn.Linear(cfg.act_dim, h)
        self.embed_ln = nn.LayerNorm(h)
        self.drop = nn.Dropout(cfg.embd_pdrop)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(h, eps=cfg.layer_norm_epsilon)
        self.predict_state = nn.Linear(h, cfg.state_dim)
        self.predict_action = nn.Sequential(nn.Linear(h, cfg.act_dim), nn.Tanh())
        self.predict_return = nn.Linear(h, 1)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.data.zero_()
        elif isinstance(m, nn.LayerNorm):
            m.bias.data.zero_()
            m.weight.data.fill_(1.0)

    def forward(self, states, actions, returns_to_go, timesteps, attention_mask=None):
        b, t = states.shape[0], states.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones((b, t), dtype=torch.long, device=states.device)

        time_emb = self.embed_timestep(timesteps)
        state_emb = self.embed_state(states) + time_emb
        action_emb = self.embed_action(actions) + time_emb
        return_emb = self.embed_return(returns_to_go) + time_emb

        # (R_1, s_1, a_1, R_2, s_2, a_2, ...)
        stacked = torch.stack((return_emb, state_emb, action_emb), dim=1).permute(0, 2, 1, 3).reshape(b, 3 * t, -1)
        stacked = self.drop(self.embed_ln(stacked))
        stacked_mask = torch.stack((attention_mask, attention_mask, attention_mask), dim=1).permute(0, 2, 1).reshape(b, 3 * t)
        ext_mask = stacked_mask[:, None, None, :].to(stacked.dtype) * -10000.0

        x = stacked
        for blk in self.blocks:
            x = blk(x, ext_mask)
        x = self.ln_f(x)

        x = x.reshape(b, t, 3, -1).permute(0, 2, 1, 3)  # (B, 3, T, h): 0 = R, 1 = s, 2 = a tokens
        return_preds = self.predict_return(x[:, 2])
        state_preds = self.predict_state(x[:, 2])
        action_preds = self.predict_action(x[:, 1])
        return state_preds, action_preds, return_preds


def action_loss(model, batch):
    states, actions, rtg, timesteps, mask = batch
    _, action_preds, _ = model(states, actions, rtg, timesteps, attention_mask=mask)
    act_dim = action_preds.shape[2]
    keep = mask.reshape(-1) > 0
    err = (action_preds.reshape(-1, act_dim) - actions.reshape(-1, act_dim)) ** 2
    return err[keep].mean()


def fake_batch(cfg, batch_size=4, lengths=(20, 14, 9, 5)):
    """Random 'trajectories', left-padded to K like the official get_batch()."""
    K = cfg.max_length
    s = torch.zeros(batch_size, K, cfg.state_dim)
    a = torch.ones(batch_size, K, cfg.act_dim) * -10.0  # official code pads actions with -10
    r = torch.zeros(batch_size, K, 1)
    ts = torch.zeros(batch_size, K, dtype=torch.long)
    m = torch.zeros(batch_size, K, dtype=torch.long)
    for i, n in enumerate(lengths):
        start = torch.randint(0, 200, (1,)).item()
        s[i, K - n :] = torch.randn(n, cfg.state_dim)
        a[i, K - n :] = torch.rand(n, cfg.act_dim) * 2 - 1
        rewards = torch.rand(n)
        r[i, K - n :, 0] = torch.flip(torch.cumsum(torch.flip(rewards, [0]), 0), [0]) / 10.0
        ts[i, K - n :] = torch.arange(start, start + n)
        m[i, K - n :] = 1
    return s, a, r, ts, m


if __name__ == "__main__":
    torch.manual_seed(42)
    cfg = DTConfig()
    model = DecisionTransformer(cfg)
    batch = fake_batch(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
    for it in range(10):
        model.train()
        loss = action_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        if it % 3 == 0:
            print(f"iter {it}: action mse {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        states, actions, rtg, timesteps, mask = batch
        _, action_preds, _ = model(states, actions, rtg, timesteps, mask)
        print("next action for traj 0:", action_preds[0, -1].tolist())
