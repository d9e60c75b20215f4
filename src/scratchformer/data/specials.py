"""The special tokens every tokenizer of ours reserves, with fixed ids (docs/contracts.md).

One place for them: tokenizers, models (padding masks, token dropout, MLM masking) and tasks
all read these names. Pure constants, no imports, so `models/` may use them too.
"""

PAD, UNK, BOS, EOS, CLS = "<pad>", "<unk>", "<bos>", "<eos>", "<cls>"
SPECIAL_TOKENS = [PAD, UNK, BOS, EOS, CLS]
PAD_ID, UNK_ID, BOS_ID, EOS_ID, CLS_ID = range(5)
NUM_SPECIALS = len(SPECIAL_TOKENS)
