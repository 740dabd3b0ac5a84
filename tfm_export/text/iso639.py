"""Language codes across conventions: an export's codes (NLLB's `eng_Latn`, mBART's `en_XX`, M2M100's and
Marian's `en`, Marian's `>>fra<<` names) as ISO 639-1 two-letter codes, which the sentence splitter
(text.sentences) and the language identifier (text.detect) take. Torch-free, pure.
"""

from __future__ import annotations

import re

# ISO 639-1 -> its ISO 639-3 code and, where it differs, its 639-2/B one (Marian and OPUS names use both).
# The languages of NLLB-200, M2M100, mBART-50 and OPUS-MT that have a two-letter code.
THREE_LETTERS = {
    "af": "afr", "am": "amh", "ar": "ara arb", "as": "asm", "az": "aze azj azb", "ba": "bak", "be": "bel",
    "bg": "bul", "bm": "bam", "bn": "ben", "bo": "bod tib", "br": "bre", "bs": "bos", "ca": "cat", "cs": "ces cze",
    "cy": "cym wel", "da": "dan", "de": "deu ger", "dz": "dzo", "el": "ell gre", "en": "eng", "eo": "epo",
    "es": "spa", "et": "est ekk", "eu": "eus baq", "fa": "fas per pes", "ff": "ful fuv", "fi": "fin", "fj": "fij",
    "fo": "fao", "fr": "fra fre", "fy": "fry", "ga": "gle", "gd": "gla", "gl": "glg", "gn": "grn", "gu": "guj",
    "ha": "hau", "he": "heb", "hi": "hin", "hr": "hrv", "ht": "hat", "hu": "hun", "hy": "hye arm", "id": "ind",
    "ig": "ibo", "is": "isl ice", "it": "ita", "ja": "jpn", "jv": "jav", "ka": "kat geo", "kg": "kon",
    "ki": "kik", "kk": "kaz", "km": "khm", "kn": "kan", "ko": "kor", "ks": "kas", "ku": "kur kmr", "ky": "kir",
    "la": "lat", "lb": "ltz", "lg": "lug", "li": "lim", "ln": "lin", "lo": "lao", "lt": "lit", "lv": "lav lvs",
    "mg": "mlg plt", "mi": "mri mao", "mk": "mkd mac", "ml": "mal", "mn": "mon khk", "mr": "mar",
    "ms": "msa may zsm", "mt": "mlt", "my": "mya bur", "nb": "nob", "ne": "nep npi", "nl": "nld dut",
    "nn": "nno", "no": "nor", "ny": "nya", "oc": "oci", "om": "orm gaz", "or": "ori ory", "pa": "pan",
    "pl": "pol", "ps": "pus pbt", "pt": "por", "qu": "que quy", "rn": "run", "ro": "ron rum", "ru": "rus",
    "rw": "kin", "sa": "san", "sc": "srd", "sd": "snd", "se": "sme", "sg": "sag", "si": "sin", "sk": "slk slo",
    "sl": "slv", "sm": "smo", "sn": "sna", "so": "som", "sq": "sqi alb als", "sr": "srp", "ss": "ssw",
    "st": "sot", "su": "sun", "sv": "swe", "sw": "swa swh", "ta": "tam", "te": "tel", "tg": "tgk", "th": "tha",
    "ti": "tir", "tk": "tuk", "tl": "tgl fil", "tn": "tsn", "tr": "tur", "ts": "tso", "tt": "tat", "tw": "twi",
    "ug": "uig", "uk": "ukr", "ur": "urd", "uz": "uzb uzn", "vi": "vie", "wo": "wol", "xh": "xho", "yi": "yid ydd",
    "yo": "yor", "zh": "zho chi cmn", "zu": "zul",
}
TWO_LETTERS = {three: two for two, threes in THREE_LETTERS.items() for three in threes.split()}
# A code's language part: before a script or region (eng_Latn, en_XX, pt-BR, zh_CN), a Marian >>fra<< name.
LANGUAGE_PART = re.compile(r"^(?:>>)?([A-Za-z]{2,3})(?:[_-][A-Za-z0-9]+)*(?:<<)?$")


def two_letter(code: str | None) -> str | None:
    """`code`'s ISO 639-1 code (eng_Latn -> en, en_XX -> en, deu -> de), or None for a language without one
    (or a code of another shape)."""
    match = LANGUAGE_PART.match(code or "")
    if not match:
        return None
    language = match.group(1).lower()
    return language if len(language) == 2 else TWO_LETTERS.get(language)
