"""Every supported Hugging Face family, registered by the module of its kind (see families.registry).

Importing this package registers them all: the BART kind (families.bart: marian, bart, mbart, m2m_100,
pegasus), the T5 kind (families.t5: t5, mt5) and Whisper (families.whisper).
"""

from __future__ import annotations

from . import bart, t5, whisper  # noqa: F401  (each registers its families)
from .registry import FAMILIES, Family, family_for, register_family, supported

__all__ = ["FAMILIES", "Family", "family_for", "register_family", "supported"]
