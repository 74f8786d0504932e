"""A small real BPE tokenizer trained in-process (no downloads), saved as a model directory."""
from pathlib import Path

TEXT = ("the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxing matches "
        "and a large number of common english words appear here so that the trainer learns whole words "
        "such as model server token prompt cache prefix request answer question capital france paris "
        "river mountain ocean planet garden window kitchen yellow purple orange silver golden ") * 20


def make_tokenizer_dir(d: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    d.mkdir(parents=True, exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    return d
