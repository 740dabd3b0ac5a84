"""tfm_export.bench.widen: a widened M2M100 computes what its proxy computes (the logits of every position, the
big vocabulary's first rows), on a tiny layout with random weights, norms and biases; greedy with a cache too."""

from __future__ import annotations

import torch
import transformers

from tfm_export.bench import widen

SMALL = dict(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
             decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, scale_embedding=True,
             activation_function="relu", decoder_start_token_id=2, dropout=0.0, attention_dropout=0.0)
BIG = dict(vocab_size=100, d_model=64, encoder_attention_heads=4, decoder_attention_heads=4,
           encoder_ffn_dim=128, decoder_ffn_dim=128)  # 4 x wider, heads 2 x as many and 2 x as wide


def _models() -> tuple[transformers.M2M100ForConditionalGeneration, transformers.M2M100ForConditionalGeneration]:
    torch.manual_seed(0)
    small = transformers.M2M100ForConditionalGeneration(transformers.M2M100Config(**SMALL)).eval()
    with torch.no_grad():
        for param in small.parameters():  # norms and biases away from 1 and 0: every plan entry matters
            param.add_(0.3 * torch.randn_like(param))
    proxy = widen.as_proxy(widen.deepen(small, 2, 3), BIG["d_model"])
    return proxy, widen.widen(proxy, BIG)


def test_widened_logits_equal_the_proxys():
    proxy, big = _models()
    src = torch.tensor([[5, 9, 13, 7, 2], [8, 30, 2, 1, 1]])
    tgt = torch.tensor([[2, 11, 4, 25, 6, 17], [2, 3, 39, 1, 1, 1]])
    with torch.no_grad():
        small_logits = proxy(input_ids=src, attention_mask=(src != 1).long(), decoder_input_ids=tgt).logits
        big_logits = big(input_ids=src, attention_mask=(src != 1).long(), decoder_input_ids=tgt).logits
    assert big.config.d_model == 64 and len(big.model.decoder.layers) == 3
    torch.testing.assert_close(big_logits[..., :SMALL["vocab_size"]], small_logits, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(big_logits, big_logits[:1].expand_as(big_logits))  # the logits depend on the input


def test_widened_greedy_with_a_cache_is_the_proxys_without():
    proxy, big = _models()
    src = torch.tensor([[5, 9, 13, 7, 2]])
    with torch.no_grad():
        cached = big.generate(input_ids=src, max_new_tokens=6, min_new_tokens=6, num_beams=1, do_sample=False,
                              bad_words_ids=[[i] for i in range(SMALL["vocab_size"], BIG["vocab_size"])])
        ids = torch.tensor([[2]])
        for _ in range(6):  # the proxy recomputes every position (it has no cache)
            logits = proxy(input_ids=src, decoder_input_ids=ids).logits[:, -1]
            logits[:, 2] = -float("inf")  # min_new_tokens: EOS banned
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    assert cached.tolist() == ids.tolist()
