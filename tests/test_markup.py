"""Documents with markup (text.markup): HTML (html.parser) and Markdown (markdown-it-py) cut into the texts
to translate and put back. Pure, no model: a translator is a function. Byte identity outside the text nodes
(an identity translator gives the source back byte for byte; an upper-casing one changes every text node and
nothing else: tags, attributes, comments, code, <pre>/<script>/<style> as they were), inline tags carried to
their words when the translation moves them, and the fallback when a fragment is not found."""

from __future__ import annotations

import pytest

from tfm_export.errors import InputError
from tfm_export.text import markup
from tfm_export.text.markup_html import Events

pytest.importorskip("markdown_it")

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>My page</title>
<style>p { color: red } /* <b>not a tag</b> */</style>
<script>if (a < b && c) { document.write("<p>hi</p>"); }</script></head>
<body class="main" data-x='1 &amp; 2'>
  <!-- a comment with <b>markup</b> -->
  <h1 id="top">Hello &amp; welcome&nbsp;home</h1>
  <p>I went to <b>Paris</b> last summer with <a href="/x?a=1&amp;b=2" title="A link">my friends</a>.</p>
  <p>Run <code>make test</code> now.<br>Second  line,
     wrapped</p>
  <pre>  keep   this <i>as</i> it is  </pre>
  <p translate="no">Brand Name</p><p class="x notranslate">Other Brand</p>
  <ul><li>One</li><li>Two <i>three</i></li><li><b><i>nested</i></b> words</li></ul>
  <table><tr><td>cell one</td><td>cell &lt;two&gt;</td></tr></table>
  <p>An unclosed <b>bold
  <div>&#169; 2024 &copy; <img src="a.png" alt="An image"> after</div>
</body></html>
"""

MARKDOWN = """# Hello *world*

Some **bold** text and a [link](http://x.org/a_(b) "The title") here,
continued on a second line with `code` and ``a `tick` `` inside.

> Quoted text with an \\* escaped star &amp; an entity.
> Second quoted line.

- item one
- item **two**
  continued

1. first
2. second ![img](a.png "An image") after

```python
print("keep *this*")
```

    indented code

| Col A | Col B |
|-------|-------|
| cell one | cell *two* |

Title
=====

<div>an html block</div>

Auto <https://example.com/a_b> link and a hard  
break, and ~~struck~~ text.

[ref]: http://example.com/ref
"""

upper = lambda texts: [t.upper() for t in texts]  # noqa: E731
identity = lambda texts: list(texts)  # noqa: E731
reverse = lambda texts: [" ".join(reversed(t.split())) for t in texts]  # noqa: E731


def html_tokens(source: str) -> list[tuple[str, str]]:
    """Every parser event with its raw text."""
    parser = Events(source)
    parser.feed(source)
    parser.close()
    starts = [start for start, *_ in parser.events] + [len(source)]
    return [(kind, source[a:b]) for (a, kind, *_), b in zip(parser.events, starts[1:])]


@pytest.mark.parametrize("source", [PAGE, PAGE.replace("\n", "\r\n"), "", "plain text, no tags", "<p></p>",
                                    "<p>a <b>b</p>", "</b>stray close", "<p>x<!-- unclosed comment"])
def test_an_identity_translator_gives_the_html_back_byte_for_byte(source):
    assert markup.translate_markup([source], "html", identity) == [source]


def test_html_changes_the_text_nodes_and_nothing_else():
    out = markup.translate_markup([PAGE], "html", upper)[0]
    before, after = html_tokens(PAGE), html_tokens(out)
    assert [t for t in before if t[0] != "data"] == [t for t in after if t[0] != "data"]  # every tag, comment, doctype
    kept = ("p { color: red } /* <b>not a tag</b> */", 'if (a < b && c) { document.write("<p>hi</p>"); }',
            "  keep   this ", "as", " it is  ", "make test", "Brand Name", "Other Brand")
    texts = [raw for kind, raw in after if kind == "data"]
    assert all(k in texts for k in kept), texts
    for phrase in ("MY PAGE", "HELLO &amp; WELCOME\xa0HOME", "I WENT TO ", "PARIS", "MY FRIENDS", " NOW.",
                   "SECOND LINE, WRAPPED", "CELL &lt;TWO&gt;", "NESTED", " AFTER", "AN UNCLOSED "):
        assert phrase in texts or any(phrase in t for t in texts), phrase
    assert "&#169; 2024 &copy; " in texts  # a text its translation leaves as it was keeps its bytes
    assert 'alt="An image"' in out and 'title="A link"' in out  # attributes are not translated (LibreTranslate's)


def test_inline_tags_are_carried_to_their_words():
    carried = markup.translate_markup(['<p>I went to <b>Paris</b> last <a href="/s">summer</a>.</p>',
                                       "<li>Two <i>three</i></li>", "<p><b><i>nested</i></b> words here</p>",
                                       "<p>Run <code>make</code> now</p>"], "html", reverse)
    assert carried == ['<p><a href="/s">summer</a>. last <b>Paris</b> to went I</p>', "<li><i>three</i> Two</li>",
                       "<p>here words <b><i>nested</i></b></p>", "<p>now <code>make</code> Run</p>"]


def test_a_fragment_the_translation_lost_falls_back_to_translating_between_the_tags():
    german = {"I went with my friends today.": "Ich ging heute mit meinen Freunden.", "my friends": "meine Freunde",
              "I went with": "Ich ging mit", "today.": "heute."}  # "meine Freunde" is not in the sentence
    out = markup.translate_markup(["<p>I went with <b>my friends</b> today.</p>"], "html",
                                  lambda texts: [german[t] for t in texts])
    assert out == ["<p>Ich ging mit <b>meine Freunde</b> heute.</p>"]
    # a code span the translation changed is never rewritten: the fallback keeps it
    out = markup.translate_markup(["<p>Run <code>make test</code> now.</p>"], "html", upper)
    assert out == ["<p>RUN <code>make test</code> NOW.</p>"]


def test_each_text_is_translated_once_per_round():
    seen = []
    markup.translate_markup(["<p>Same.</p><p>Same.</p>", "<p>Same.</p>"], "html",
                            lambda texts: seen.append(list(texts)) or list(texts))
    assert seen == [["Same."]]


def markdown_structure(source: str) -> list[tuple]:
    """markdown-it's tokens less their text: types, tags, markup, info, attributes, code contents."""
    from tfm_export.text.markup_md import parser

    out = []
    for token in parser().parse(source):
        for t in [token, *(c for c in token.children or [] if c.type not in ("text", "softbreak"))]:
            code = t.content if t.type in ("code_inline", "code_block", "fence", "html_block", "html_inline") else ""
            out.append((t.type, t.tag, t.markup, t.info, sorted((t.attrs or {}).items()), code))
    return out


@pytest.mark.parametrize("source", [MARKDOWN, MARKDOWN.replace("\n", "\r\n"), "", "# only a heading", "text\\",
                                    "* [unclosed link(x", "a <b>bold</b> and <br> break"])
def test_an_identity_translator_gives_the_markdown_back_byte_for_byte(source):
    assert markup.translate_markup([source], "markdown", identity) == [source]


def test_markdown_changes_the_text_and_keeps_the_structure():
    out = markup.translate_markup([MARKDOWN], "markdown", upper)[0]
    assert markdown_structure(out) == markdown_structure(MARKDOWN)
    for kept in ('```python\nprint("keep *this*")\n```', "    indented code", "<div>an html block</div>",
                 "](http://x.org/a_(b) \"The title\")", '![img](a.png "An image")', "<https://example.com/a_b>",
                 "`code`", "``a `tick` ``", "[ref]: http://example.com/ref", "|-------|-------|"):
        assert kept in out, kept
    for changed in ("# HELLO *WORLD*", "SOME **BOLD** TEXT AND A [LINK]", "> QUOTED TEXT WITH AN \\* ESCAPED STAR",
                    "- ITEM **TWO** CONTINUED", "| CELL ONE | CELL *TWO* |", "TITLE\n=====", "~~STRUCK~~ TEXT."):
        assert changed in out, changed


def test_markdown_carries_emphasis_and_links_when_the_words_move():
    out = markup.translate_markup(["See [the docs](http://d.org) or **the shop** now", "*big* house",
                                   # "docs the" is not in "docs. the see ...": between the markup instead
                                   "Go to **the shop** now and see [the docs](http://d.org)."], "markdown", reverse)
    assert out == ["now **shop the** or [docs the](http://d.org) See", "house *big*",
                   "to Go **shop the** see and now [docs the](http://d.org)."]


def test_an_unknown_format_is_a_one_line_error():
    with pytest.raises(InputError, match="format 'pdf' is not one of text, html, markdown"):
        markup.parse("x", "pdf")
