r"""An opus-mt-sized Marian folder as Helsinki-NLP publishes it, with random (seeded) weights.

    .venv/bin/python -m benchmarks opus-mt-folder OUT [--vocab 15600] [--seed 0] [--tiny]

Built by the test fixtures (tests/marian_fixtures.py: marian_folder(..., **OPUS_MT)): 6 + 6 layers of
512 wide, 8 heads, ffn 2048, 512 positions, vocab.json padded to --vocab ids, real SentencePiece files,
and the published generation_config.json (num_beams 4, the pad id banned, max_length 512, renormalised
logits, forced EOS), so that an export of it decodes with beam 4 by default. --tiny: the fixtures' tiny
sizes instead (2 + 2 layers of 32 wide; the vocabulary unpadded unless --vocab is given), for smoke tests.

OUT is built in a temporary sibling folder and renamed into place; an existing OUT is never replaced.
"""

from __future__ import annotations

from pathlib import Path
import argparse
import json
import os
import shutil
import tempfile

from benchmarks import fixtures


def opus_mt_folder_main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the folder to write (must not exist)")
    parser.add_argument("--vocab", type=int, default=None,
                        help="ids in vocab.json (default: 15600, opus-mt-en-de's size; --tiny: unpadded)")
    parser.add_argument("--seed", type=int, default=0, help="weights (default: 0)")
    parser.add_argument("--tiny", action="store_true", help="the fixtures' tiny sizes (smoke tests)")
    args = parser.parse_args()
    out = args.out
    if out.exists() or out.is_symlink():
        raise SystemExit(f"{out} exists; choose another name")
    out.parent.mkdir(parents=True, exist_ok=True)
    vocab = args.vocab if args.vocab is not None or args.tiny else 15_600
    sizes = {} if args.tiny else fixtures.marian().OPUS_MT
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    partial.chmod(0o777 & ~umask)  # mkdtemp's 0700 -> as a plain mkdir would make it
    try:
        fixtures.marian().marian_folder(partial, seed=args.seed, vocab_size=vocab, **sizes)
        if out.exists() or out.is_symlink():  # made while we built (a rename would replace an empty folder)
            raise SystemExit(f"{out} appeared while building; left as it is")
        os.rename(partial, out)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    config = json.loads((out / "config.json").read_text())
    generation = json.loads((out / "generation_config.json").read_text())
    print(f"wrote {out}: d_model {config['d_model']}, {config['encoder_layers']}+{config['decoder_layers']} layers, "
          f"{config['encoder_attention_heads']} heads, ffn {config['encoder_ffn_dim']}, vocab {config['vocab_size']}; "
          f"generation_config num_beams {generation.get('num_beams')}, max_length {generation.get('max_length')}")

