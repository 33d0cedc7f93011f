#!/usr/bin/env python3
"""Writes tests/data/tokenizer/corpus.jsonl: the strings every tokenizer test encodes.

Deterministic (fixed seed): hand-written edge cases first, then generated lines per category
(English with contractions, CJK, emoji incl. ZWJ sequences/flags/skin tones, code, whitespace
runs, numbers, mixed scripts, combining marks and non-NFC text, special tokens inside text,
random code points). One JSON object per line: {"id": n, "cat": "...", "text": "..."}.
Usage: python3 scripts/tokenizer_corpus.py
"""
import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizer" / "corpus.jsonl"

HAND = [
    "", " ", "  ", "\n", "\t", "\r\n", "a", "Hello, world!", "Hello world", " Hello world", "Hello  world ",
    "I'm sure they'll say it's fine, don't you think? We've seen it. He'd've gone.",
    "I'M SURE THEY'LL SAY IT'S FINE. WE'VE. HE'D. YOU'RE.", "'s 't 're 've 'm 'll 'd", "'S'T'RE'VE'M'LL'D",
    "can't won't shouldn't y'all o'clock rock'n'roll", "‘curly’ “quotes” and ’s and 'ſ and 'K",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>",
    "text<|endoftext|>more text", "<|endoftext|><|endoftext|>", "<|im_start|><|im_end|>", "<|im_start",
    "im_start|>", "<|im_start|", "< |im_start| >", "<|IM_START|>", "<<|im_start|>>", "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<repo_name>voltinfer<file_sep>src/main.cpp", "a <mask> b", "x<mask>y", "  <mask>  \n", "<mask><mask>",
    "[[user]] hi [[user]]", "<s>already</s>", "prefix<|im_end|>", "<|im_end|>suffix", " <|im_end|> ",
    "1", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "-42", "1e-10", "0x1F", "v1.2.3",
    "١٢٣٤ ٥٦٧", "½ ¾ ² ³ Ⅻ ⅷ", "①②③", "𝟘𝟙𝟚", "٣.١٤",
    "你好，世界！这是一个测试。", "日本語のテキストとカタカナ ー", "한국어 텍스트입니다", "Россия и Українa", "مرحبا بالعالم",
    "שלום עולם", "नमस्ते दुनिया", "สวัสดีครับ ผมชื่ออเล็กซ์", "Ελληνικά κείμενα", "Tiếng Việt có dấu",
    "Café naïve résumé façade Ångström", "e\u0301 a\u0300 o\u0308 n\u0303", "\u1100\u1161\u11a8 \u1112\u1161\u11ab",
    "A\u030a vs \u00c5 vs \u212b", "\ufb01 \ufb02 \u2126 \u00b5", "\u0915\u094d\u0937", "a\u0301\u0301\u0301",
    "\u0301 leading mark", "x\u20dd y\u20e3", "1\ufe0f\u20e3 #\ufe0f\u20e3",
    "Emoji: 😀👍🏽🇺🇸 and ❤️", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 🏴‍☠️", "🇯🇵🇰🇷🇨🇳🇩🇪", "🧑🏿‍💻 👩🏻‍🔬",
    "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f", "😀😀😀😀😀", "☃ ★ ♥ ♠ ✓ ✗ →",
    "zero\u200bwidth\u200cjoin\u200dnon", "nbsp\u00a0here", "ideographic\u3000space", "bom\ufeffinside",
    "\ufeffbom at start", "replacement \ufffd char", "private \ue000\uf8ff use", "\U0010fffd plane 16",
    "tab\tsep\tvalues", "trailing spaces   ", "   leading spaces", "a\n\nb\n\n\nc", "a\r\nb\rc\n",
    "\n\n\n", " \n \n ", "\t\t\t", "    ", "  \t  \n  ", "line\u2028sep\u2029para", "nel\u0085here",
    "vt\x0bff\x0c", "bell\x07 esc\x1b[31m", "nul\x00byte", "del\x7f",
    "def foo(x):\n    return x ** 2  # comment", "int main() { return 0; }",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}", "SELECT * FROM users WHERE id = 42;",
    "if x != nil {\n\treturn err\n}", "fn main() { println!(\"hi {}\", 1); }", "console.log(`${a}+${b}`);",
    "<div class=\"a\">&amp;&lt;</div>", "$ ls -la | grep '^d' > out.txt 2>&1", "#include <vector>",
    "x=1;y=2;z=x+y", "a_b_c __init__ __name__ == '__main__'", "https://example.com/path?q=1&r=2#frag",
    "user@example.com", "C:\\Users\\name\\file.txt", "{\"key\": [1, 2, {\"n\": null}]}",
    "!!!???...", "---", "...", "___", "***", "~~~", "```python\nprint(1)\n```", "====", "////",
    "Punctuation!!! ??? ... --- (parens) [brackets] {braces}", "a.b,c;d:e!f?g", "«guillemets» „Anführung“",
    "ABC123def456", "abc 123 def 456", "123abc", "abc123", "x1y2z3", "1a2b3c", "一二三123四五六",
    "どこで生れ。Yes", "Apples are りんご 林檎", "mixed中文English日本語한국어", "Straße STRASSE ß ẞ",
    "İstanbul ıi", "ǅ ǈ ǋ", "ﬀ ﬃ", "Ⓐⓑ", "𝐀𝐁𝐂 𝒜", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３",
    "ا\u064e ب\u0650", "\u0e01\u0e34\u0e48", "a" * 300, " " * 300, "\n" * 50, "ab" * 200,
    "😀" * 60, "中" * 200, "1" * 100, "!" * 100, "a " * 150, "\t \n" * 40,
]

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had "
         "by word but not what all were we when your can said there use an each which she do how their if will "
         "up other about out many then them these so some her would make like him into time has look two more "
         "write go see number no way could people my than first water been call who oil its now find long down "
         "day did get come made may part tokenizer inference server volta kernel attention quantization").split()
CONTRACTIONS = ["don't", "can't", "it's", "I'm", "we're", "they've", "she'll", "he'd", "You're", "ISN'T", "It'S"]
ZH = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从"
JA = ["こんにちは", "ありがとう", "東京", "カタカナ", "ひらがな", "漢字", "です", "ます", "テスト", "日本語", "ラーメン", "ー", "、", "。"]
KO = ["안녕하세요", "감사합니다", "서울", "한국어", "테스트", "입니다", "사랑", "컴퓨터"]
EMOJI = ["😀", "😂", "🥲", "👍", "👍🏽", "👍🏿", "❤️", "🔥", "🎉", "🇺🇸", "🇫🇷", "🇧🇷", "👨‍💻", "👩‍❤️‍👨", "🧑‍🤝‍🧑",
         "🏳️‍⚧️", "🐈‍⬛", "😶‍🌫️", "#️⃣", "©️", "🫠", "🦀", "🐍"]
CODE = [
    "def {n}(a, b):\n    return a {op} b\n", "const {n} = (a, b) => a {op} b;", "int {n}(int a, int b) {{ return a {op} b; }}",
    "fn {n}(a: i32, b: i32) -> i32 {{ a {op} b }}", "func {n}(a, b int) int {{\n\treturn a {op} b\n}}",
    "let {n} a b = a {op} b", "{n} <- function(a, b) a {op} b", "public static int {n}(int a, int b) {{ return a {op} b; }}",
    "    if ({n} {op}= 0x{h}) {{\n        throw new Error('bad');\n    }}", "# {n}: {h}\nprint(f\"{{{n}!r}}\")",
]
SCRIPTS = ["Привет мир", "Γειά σου Κόσμε", "مرحبا", "שלום", "नमस्ते", "বাংলা", "தமிழ்", "ไทย", "ქართული", "Հայերեն",
           "አማርኛ", "ᚠᛇᚻ", "Ελληνικά", "Español ñ", "Português ção", "Français œ", "Deutsch äöü", "Čeština ř",
           "Türkçe ğş", "Polski ąę", "Tiếng Việt", "ᠮᠣᠩᠭᠣᠯ", "ꦗꦮ", "𓀀𓁐"]
WS = [" ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "\t\n", "\u00a0", "\u3000", "   ", "\n   ", "\r"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<|fim_prefix|>", "<file_sep>", "<repo_name>"]
# Ranges of assigned, non-surrogate code points for random strings.
RANGES = [(0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x5ff),
          (0x600, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x2000, 0x206f), (0x20a0, 0x20cf),
          (0x2100, 0x214f), (0x2190, 0x21ff), (0x2500, 0x257f), (0x3040, 0x30ff), (0x4e00, 0x9fff),
          (0xac00, 0xd7a3), (0xff00, 0xffef), (0x1f300, 0x1f5ff), (0x1f600, 0x1f64f), (0x1f900, 0x1f9ff),
          (0x1d400, 0x1d7ff), (0x20000, 0x2a6df)]


def gen(rng: random.Random):
    out = []
    for _ in range(70):
        n = rng.randint(3, 25)
        ws = [rng.choice(WORDS + CONTRACTIONS) for _ in range(n)]
        if rng.random() < 0.5:
            ws[0] = ws[0].capitalize()
        s = " ".join(ws) + rng.choice([".", "!", "?", ",", "", "...", ";"])
        out.append(("english", s))
    for _ in range(40):
        s = "".join(rng.choice(ZH) for _ in range(rng.randint(2, 30)))
        if rng.random() < 0.4:
            s += rng.choice(["，", "。", "！", "？", "、", " ", "：", "“", "”"]) + "".join(rng.choice(ZH) for _ in range(5))
        out.append(("chinese", s))
    for _ in range(30):
        out.append(("japanese", "".join(rng.choice(JA) for _ in range(rng.randint(2, 8)))))
    for _ in range(25):
        out.append(("korean", " ".join(rng.choice(KO) for _ in range(rng.randint(1, 6)))))
    for _ in range(40):
        parts = [rng.choice(EMOJI) if rng.random() < 0.6 else rng.choice(WORDS) for _ in range(rng.randint(1, 8))]
        out.append(("emoji", rng.choice(["", " "]).join(parts)))
    for _ in range(50):
        t = rng.choice(CODE)
        name = rng.choice(["add", "mul", "foo_bar", "camelCase", "x", "__init__", "getValue2"])
        out.append(("code", t.format(n=name, op=rng.choice(["+", "-", "*", "/", "%", "<<", "&&", "|"]),
                                     h=format(rng.randrange(1 << 24), "x"))))
    for _ in range(40):
        s = "".join(rng.choice(WS) if rng.random() < 0.5 else rng.choice(WORDS + ["1", "23", "!", "?", "."])
                    for _ in range(rng.randint(2, 14)))
        out.append(("whitespace", s))
    for _ in range(40):
        k = rng.randint(0, 5)
        if k == 0:
            s = str(rng.randrange(10 ** rng.randint(1, 20)))
        elif k == 1:
            s = f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"
        elif k == 2:
            s = " ".join(str(rng.randint(0, 9999)) for _ in range(rng.randint(2, 8)))
        elif k == 3:
            s = f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{rng.randint(1900, 2100)} at {rng.randint(0, 23)}:{rng.randint(0, 59):02d}"
        elif k == 4:
            s = f"${rng.randint(0, 99999):,}.{rng.randint(0, 99):02d} and {rng.randint(1, 100)}%"
        else:
            s = "".join(rng.choice("0123456789abc") for _ in range(rng.randint(5, 30)))
        out.append(("numbers", s))
    for _ in range(40):
        parts = [rng.choice(SCRIPTS + WORDS + [rng.choice(ZH) * 2] + JA + KO) for _ in range(rng.randint(2, 6))]
        out.append(("mixed", rng.choice([" ", "", "-", ", "]).join(parts)))
    for _ in range(30):
        base = rng.choice(["e", "a", "o", "u", "n", "c", "A", "E", "i", "ก", "к", "α"])
        marks = "".join(chr(rng.randint(0x300, 0x36f)) for _ in range(rng.randint(1, 4)))
        out.append(("marks", rng.choice(WORDS) + " " + base + marks + rng.choice(WORDS) + " " +
                    chr(0x1100 + rng.randint(0, 18)) + chr(0x1161 + rng.randint(0, 20))))
    for _ in range(40):
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(SPECIALS))
            elif r < 0.8:
                parts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))))
            else:
                parts.append(rng.choice(WS))
        out.append(("special", "".join(parts)))
    for _ in range(40):
        cps = []
        for _ in range(rng.randint(1, 24)):
            lo, hi = rng.choice(RANGES)
            cps.append(chr(rng.randint(lo, hi)))
        out.append(("random", "".join(cps)))
    # One long document for the throughput path.
    doc = []
    for _ in range(400):
        doc.append(rng.choice([" ".join(rng.choice(WORDS) for _ in range(12)), rng.choice(ZH) * 3,
                               rng.choice(EMOJI), rng.choice(CODE).format(n="f", op="+", h="ff"), "\n\n"]))
    out.append(("long", " ".join(doc)))
    return out


def main():
    rng = random.Random(20240611)
    lines = [("hand", s) for s in HAND] + gen(rng)
    with OUT.open("w", encoding="utf-8") as f:
        for i, (cat, text) in enumerate(lines):
            f.write(json.dumps({"id": i, "cat": cat, "text": text}) + "\n")
    print(f"wrote {len(lines)} lines to {OUT}")


if __name__ == "__main__":
    main()
