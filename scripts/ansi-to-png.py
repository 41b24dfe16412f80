#!/usr/bin/env python3
"""Render a terminal capture with ANSI colours (`tmux capture-pane -e -p`) to a PNG.

Usage: scripts/ansi-to-png.py CAPTURE.txt OUT.png [--cols 120] [--font FILE.ttf]

Needs Pillow (PyPI `pillow`, Debian `python3-pil`) and a monospace TrueType font (Debian
`fonts-dejavu-core`: /usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf). Understands the SGR
codes tmux writes: reset, bold, dim, italic, underline, reverse, the 16 colours, 256 colours
and 24-bit colours, default foreground and background.
"""
import argparse
import re
import sys
import unicodedata

try:
    from PIL import Image, ImageDraw, ImageFont
except ImportError:
    sys.exit("error: Pillow is needed (pip install pillow, or apt-get install python3-pil)")

FONT_DIR = "/usr/share/fonts/truetype/dejavu/"
DEFAULT_FG = (204, 204, 204)
DEFAULT_BG = (24, 24, 27)
# xterm's 16 colours, slightly softened.
BASE16 = [
    (40, 40, 46), (205, 49, 49), (13, 188, 121), (229, 229, 16),
    (36, 114, 200), (188, 63, 188), (17, 168, 205), (204, 204, 204),
    (102, 102, 102), (241, 76, 76), (35, 209, 139), (245, 245, 67),
    (59, 142, 234), (214, 112, 214), (41, 184, 219), (242, 242, 242),
]


def color256(n):
    if n < 16:
        return BASE16[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return (steps[n // 36], steps[(n // 6) % 6], steps[n % 6])
    v = 8 + (n - 232) * 10
    return (v, v, v)


class Style:
    def __init__(self):
        self.reset()

    def reset(self):
        self.fg = None
        self.bg = None
        self.bold = self.dim = self.italic = self.underline = self.reverse = False

    def copy(self):
        s = Style()
        s.__dict__.update(self.__dict__)
        return s

    def apply(self, params):
        codes = [int(p) if p else 0 for p in params.split(";")] if params else [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                self.reset()
            elif c == 1:
                self.bold = True
            elif c == 2:
                self.dim = True
            elif c == 3:
                self.italic = True
            elif c == 4:
                self.underline = True
            elif c == 7:
                self.reverse = True
            elif c == 22:
                self.bold = self.dim = False
            elif c == 23:
                self.italic = False
            elif c == 24:
                self.underline = False
            elif c == 27:
                self.reverse = False
            elif 30 <= c <= 37:
                self.fg = BASE16[c - 30]
            elif 90 <= c <= 97:
                self.fg = BASE16[c - 90 + 8]
            elif 40 <= c <= 47:
                self.bg = BASE16[c - 40]
            elif 100 <= c <= 107:
                self.bg = BASE16[c - 100 + 8]
            elif c == 39:
                self.fg = None
            elif c == 49:
                self.bg = None
            elif c in (38, 48) and i + 1 < len(codes):
                if codes[i + 1] == 5 and i + 2 < len(codes):
                    col = color256(codes[i + 2])
                    i += 2
                elif codes[i + 1] == 2 and i + 4 < len(codes):
                    col = tuple(codes[i + 2:i + 5])
                    i += 4
                else:
                    col = None
                if c == 38:
                    self.fg = col
                else:
                    self.bg = col
            i += 1


SGR = re.compile(r"\x1b\[([0-9;]*)m")
OTHER_ESC = re.compile(r"\x1b(\[[0-9;?]*[A-Za-ln-z]|\][^\x07]*\x07|[()][A-Z0-9])")


def parse(text):
    """Lines of (char, Style) cells."""
    rows = []
    style = Style()
    for line in text.split("\n"):
        line = OTHER_ESC.sub("", line)
        cells = []
        pos = 0
        for m in SGR.finditer(line):
            for ch in line[pos:m.start()]:
                cells.append((ch, style.copy()))
            style.apply(m.group(1))
            pos = m.end()
        for ch in line[pos:]:
            cells.append((ch, style.copy()))
        rows.append(cells)
    while rows and not rows[-1]:
        rows.pop()
    return rows


def width(ch):
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("out")
    ap.add_argument("--cols", type=int, default=120)
    ap.add_argument("--size", type=int, default=15, help="font size in pixels")
    ap.add_argument("--font", default=FONT_DIR + "DejaVuSansMono.ttf")
    ap.add_argument("--bold-font", default=FONT_DIR + "DejaVuSansMono-Bold.ttf")
    args = ap.parse_args()
    try:
        regular = ImageFont.truetype(args.font, args.size)
        bold = ImageFont.truetype(args.bold_font, args.size)
    except OSError as e:
        sys.exit(f"error: font not found ({e}); apt-get install fonts-dejavu-core, or pass --font")
    rows = parse(open(args.capture, encoding="utf-8", errors="replace").read())
    left, top, right, bottom = regular.getbbox("M")
    cell_w = round(regular.getlength("M"))
    ascent, descent = regular.getmetrics()
    cell_h = ascent + descent + 2
    pad = 12
    img = Image.new("RGB", (pad * 2 + cell_w * args.cols, pad * 2 + cell_h * len(rows)), DEFAULT_BG)
    draw = ImageDraw.Draw(img)
    for y, cells in enumerate(rows):
        x = 0
        for ch, st in cells:
            w = width(ch)
            if w == 0:
                continue
            fg = st.fg or DEFAULT_FG
            bg = st.bg
            if st.reverse:
                fg, bg = (bg or DEFAULT_BG), fg
            if st.dim:
                fg = tuple((a + b) // 2 for a, b in zip(fg, DEFAULT_BG))
            px, py = pad + x * cell_w, pad + y * cell_h
            if bg is not None:
                draw.rectangle([px, py, px + cell_w * w - 1, py + cell_h - 1], fill=bg)
            if ch.strip():
                font = bold if st.bold else regular
                cp = ord(ch)
                if cp in (0x2500, 0x2502):
                    # Light lines drawn through the whole cell, so they join from row to row.
                    mx, my = px + cell_w // 2, py + cell_h // 2
                    if cp == 0x2500:
                        draw.line([px, my, px + cell_w - 1, my], fill=fg)
                    else:
                        draw.line([mx, py, mx, py + cell_h - 1], fill=fg)
                elif 0x2581 <= cp <= 0x2588:
                    # Lower eighth blocks (sparklines, bars): exact fractions of the cell.
                    h = round(cell_h * (cp - 0x2580) / 8)
                    draw.rectangle([px, py + cell_h - h, px + cell_w - 1, py + cell_h - 1], fill=fg)
                elif 0x2500 <= cp <= 0x259F:
                    # Box drawing and blocks: stretch to the whole cell so lines join.
                    glyph = Image.new("L", (cell_w * w, cell_h), 0)
                    gd = ImageDraw.Draw(glyph)
                    gd.text((0, 1), ch, font=font, fill=255)
                    img.paste(Image.new("RGB", glyph.size, fg), (px, py), glyph)
                else:
                    draw.text((px, py + 1), ch, font=font, fill=fg)
            if st.underline:
                draw.line([px, py + cell_h - 2, px + cell_w * w - 1, py + cell_h - 2], fill=fg)
            x += w
    img.save(args.out, optimize=True)


if __name__ == "__main__":
    main()
