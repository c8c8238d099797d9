#!/usr/bin/env python3
"""Conformance of cpmserve's image decode and bicubic resize against Pillow.

HF image processors (MiniCPM-V's included) do `Image.open(f).convert("RGB")` and then
`image.resize((w, h), Image.BICUBIC)`, so Pillow defines the pixels the vision tower must see.
This script makes images with Pillow, runs the C++ probe (src/multimodal/image_probe.cc:
DecodeImage, then ResizeBicubic when a size is given, raw RGB out) on the same files, and
requires byte equality.

  pil_resize_check.py PROBE resize   random RGB images of odd sizes x many target sizes
  pil_resize_check.py PROBE decode   PNG (every colour type and bit depth, tRNS, Adam7), JPEG
                                     (4:2:0, 4:2:2, 4:4:4, progressive, gray, CMYK) and WebP
                                     (lossy, lossless, alpha, animated) vs convert("RGB"); and
                                     each again with `PROBE --vllm-alpha` vs vLLM's
                                     convert_image_mode (mode "RGBA" pasted over white)

Exit 0 when everything is equal, 1 on any difference, 77 (skip) without Pillow or numpy.
"""
import os
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    import numpy as np
    from PIL import Image, features
except ImportError as e:  # Debian: python3-pil, python3-numpy (scripts/install_deps.sh)
    print(f"skip: {e}")
    sys.exit(77)


class Checker:
    def __init__(self, probe, workdir):
        self.probe = probe
        self.workdir = workdir
        self.cases = 0
        self.pixels = 0
        self.failures = []

    def run_probe(self, path, size=None, flags=()):
        out = os.path.join(self.workdir, "out.rgb")
        args = [self.probe, *flags, path, out] + ([str(size[0]), str(size[1])] if size else [])
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode != 0:
            return None, proc.stderr.strip()
        w, h = (int(v) for v in proc.stdout.strip().split("x"))
        with open(out, "rb") as f:
            return (w, h, f.read()), None

    def compare(self, label, path, expected_image, size=None, flags=()):
        """expected_image: the Pillow RGB image the probe must reproduce byte for byte."""
        self.cases += 1
        got, err = self.run_probe(path, size, flags)
        want = expected_image.tobytes()
        if got is None:
            self.failures.append(f"{label}: probe failed: {err}")
            return
        w, h, data = got
        if (w, h) != expected_image.size:
            self.failures.append(f"{label}: size {w}x{h}, Pillow {expected_image.size}")
            return
        self.pixels += w * h
        if data == want:
            return
        a = np.frombuffer(data, np.uint8).astype(int)
        b = np.frombuffer(want, np.uint8).astype(int)
        diff = np.abs(a - b)
        first = int(np.argmax(diff > 0))
        px = first // 3
        self.failures.append(
            f"{label}: {int((diff > 0).sum())} of {diff.size} bytes differ, max |diff| "
            f"{int(diff.max())}, first at x={px % w} y={px // w} c={first % 3}: "
            f"ours {a[first]} Pillow {b[first]}")


def random_rgb(rng, w, h):
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")


def photo_like(w, h):
    """Smooth ramps with hard edges and saturated areas: exercises clipping at 0 and 255."""
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1))
    g = np.where((x // 7 + y // 5) % 2 == 0, 255, 0)
    b = (128 + 127 * np.sin(x / 3.0 + y / 5.0)).astype(int)
    return Image.fromarray(np.stack([r, g, b], -1).astype(np.uint8), "RGB")


def target_sizes(w, h):
    """Up and down, each axis alone and both, to one pixel, big ratios, near-identity."""
    sizes = {
        (w, h), (1, 1), (w, 1), (1, h), (max(w // 2, 1), h), (w, max(h // 2, 1)),
        (w * 2, h), (w, h * 3), (w * 2 + 1, h * 2 + 1), (max(w // 3, 1), max(h // 3, 1)),
        (w + 1, h), (w, h + 1), (max(w - 1, 1), h), (max(w * 7 // 10, 1), max(h * 13 // 10, 1)),
        (max(w * 13 // 10, 1), max(h * 7 // 10, 1)), (56, 56), (448, 336), (5, 3),
        (max(w // 18, 1), max(h // 18, 1)),
    }
    return sorted(s for s in sizes if s[0] * s[1] <= 4_000_000)


def check_resize(chk, tmp):
    rng = np.random.default_rng(20240601)
    sources = [(f"noise{w}x{h}", random_rgb(rng, w, h))
               for w, h in [(1, 1), (2, 2), (3, 7), (7, 3), (97, 61), (640, 480), (1000, 333)]]
    sources.append(("photo517x389", photo_like(517, 389)))
    for name, im in sources:
        path = os.path.join(tmp, name + ".png")
        im.save(path)
        for size in target_sizes(*im.size):
            chk.compare(f"resize {name} -> {size[0]}x{size[1]}", path,
                        im.resize(size, Image.BICUBIC), size)
    # Big ratios as MiniCPM-V thumbnails and slices see them (e.g. 1000 -> 56 along one axis).
    big = random_rgb(rng, 1000, 1000)
    path = os.path.join(tmp, "big.png")
    big.save(path)
    for size in [(56, 56), (1000, 56), (56, 1000), (14, 1), (1, 997)]:
        chk.compare(f"resize noise1000x1000 -> {size[0]}x{size[1]}", path,
                    big.resize(size, Image.BICUBIC), size)
    # The whole HF path: JPEG decode, then resize.
    jpeg = os.path.join(tmp, "photo.jpg")
    photo_like(517, 389).save(jpeg, quality=90)
    decoded = Image.open(jpeg).convert("RGB")
    for size in [(448, 336), (224, 168), (600, 451), (517, 100)]:
        chk.compare(f"resize photo.jpg -> {size[0]}x{size[1]}", jpeg,
                    decoded.resize(size, Image.BICUBIC), size)


def png_bytes(w, h, color_type, bit_depth, samples, plte=None, trns=None, interlace=False):
    """A PNG from unpacked samples [h][w][channels] (any bit depth), filter 0, optional Adam7."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    def pack_row(values):
        if bit_depth == 16:
            return b"\0" + b"".join(struct.pack(">H", int(v)) for v in values)
        if bit_depth == 8:
            return b"\0" + bytes(int(v) for v in values)
        bits = "".join(format(int(v), f"0{bit_depth}b") for v in values)
        bits += "0" * (-len(bits) % 8)
        return b"\0" + bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))

    passes = ([(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
               (0, 1, 1, 2)] if interlace else [(0, 0, 1, 1)])
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = samples[y0::dy, x0::dx]
        if sub.size:
            raw += b"".join(pack_row(row.reshape(-1)) for row in sub)
    out = b"\x89PNG\r\n\x1a\n" + chunk(
        b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, int(interlace)))
    if plte is not None:
        out += chunk(b"PLTE", bytes(plte))
    if trns is not None:
        out += chunk(b"tRNS", bytes(trns))
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def hand_made_pngs(rng):
    """PNGs Pillow cannot write: 16-bit colour, low-bit gray and palettes, tRNS, Adam7."""
    w, h = 23, 17
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
    cases = []
    for ct, depth in [(2, 16), (6, 16), (4, 16), (0, 16), (0, 1), (0, 2), (0, 4), (3, 1), (3, 2),
                      (3, 4), (3, 8), (2, 8), (6, 8), (4, 8), (0, 8)]:
        top = 2 ** depth
        samples = rng.integers(0, top, (h, w, channels[ct]))
        if ct == 0 and depth == 16:
            samples[::2] = rng.integers(0, 300, samples[::2].shape)  # values around the clip
        plte = trns = None
        if ct == 3:
            plte = rng.integers(0, 256, 3 * top).tolist()
            trns = rng.integers(0, 256, max(top // 2, 1)).tolist()
        elif ct == 2:
            trns = list(struct.pack(">HHH", *(int(v) for v in samples[0, 0])))
        elif ct == 0:
            trns = list(struct.pack(">H", int(samples[0, 0, 0])))
        for interlace in (False, True):
            name = f"ct{ct}_{depth}bit{'_adam7' if interlace else ''}"
            cases.append((name, png_bytes(w, h, ct, depth, samples, plte, trns, interlace)))
    return cases


def pillow_pngs(rng, tmp):
    w, h = 31, 19
    ims = {
        "RGB": random_rgb(rng, w, h),
        "RGBA": Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA"),
        "LA": Image.fromarray(rng.integers(0, 256, (h, w, 2), dtype=np.uint8), "LA"),
        "L": Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L"),
        "1": Image.fromarray(rng.integers(0, 2, (h, w), dtype=np.uint8) * 255, "L").convert("1"),
        "I;16": Image.fromarray(rng.integers(0, 1024, (h, w), dtype=np.uint16), "I;16"),
    }
    paths = []
    for mode, im in ims.items():
        path = os.path.join(tmp, f"pil_{mode.replace(';', '')}.png")
        im.save(path)
        paths.append((f"png {mode}", path))
    p = Image.fromarray(rng.integers(0, 16, (h, w), dtype=np.uint8), "P")
    p.putpalette(rng.integers(0, 256, 48, dtype=np.uint8).tolist())
    for label, transparency in [("P tRNS index", 3), ("P tRNS table", bytes(range(0, 256, 16)))]:
        path = os.path.join(tmp, f"pil_{label.replace(' ', '_')}.png")
        p.save(path, transparency=transparency)
        paths.append((f"png {label}", path))
    return paths


def jpegs(rng, tmp):
    paths = []
    for w, h in [(97, 61), (1, 1), (17, 9), (1000, 333)]:
        noise = random_rgb(rng, w, h)
        photo = photo_like(w, h)
        for name, im in [("noise", noise), ("photo", photo)]:
            for label, kwargs in [("q90 4:2:0", dict(quality=90, subsampling=2)),
                                  ("q90 4:2:2", dict(quality=90, subsampling=1)),
                                  ("q95 4:4:4", dict(quality=95, subsampling=0)),
                                  ("q75 progressive", dict(quality=75, progressive=True))]:
                path = os.path.join(tmp, f"{name}_{w}x{h}_{label.replace(' ', '_').replace(':', '')}.jpg")
                im.save(path, **kwargs)
                paths.append((f"jpeg {name} {w}x{h} {label}", path))
        path = os.path.join(tmp, f"gray_{w}x{h}.jpg")
        photo.convert("L").save(path, quality=90)
        paths.append((f"jpeg gray {w}x{h} q90", path))
        path = os.path.join(tmp, f"cmyk_{w}x{h}.jpg")
        Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "CMYK").save(path, quality=90)
        paths.append((f"jpeg cmyk {w}x{h} q90", path))
    return paths


def webps(rng, tmp):
    paths = []
    for w, h in [(97, 61), (1, 1), (640, 480)]:
        rgb = photo_like(w, h)
        rgba = rgb.copy()
        rgba.putalpha(Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L"))
        for label, im, kwargs in [("lossy q80", rgb, dict(quality=80)),
                                  ("lossy alpha q80", rgba, dict(quality=80)),
                                  ("lossless", rgb, dict(lossless=True)),
                                  ("lossless alpha exact", rgba, dict(lossless=True, exact=True)),
                                  ("lossless alpha", rgba, dict(lossless=True))]:
            path = os.path.join(tmp, f"{w}x{h}_{label.replace(' ', '_')}.webp")
            im.save(path, **kwargs)
            paths.append((f"webp {w}x{h} {label}", path))
    frames = [photo_like(64, 48), random_rgb(rng, 64, 48)]
    path = os.path.join(tmp, "animated.webp")
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, lossless=True)
    paths.append(("webp animated (first frame)", path))
    frames = [f.convert("RGBA") for f in frames]
    frames[0].putalpha(Image.fromarray(rng.integers(0, 256, (48, 64), dtype=np.uint8), "L"))
    path = os.path.join(tmp, "animated_alpha.webp")
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, lossless=True)
    paths.append(("webp animated alpha (first frame)", path))
    return paths


def vllm_convert_image_mode(image):
    """vllm/multimodal/image.py convert_image_mode(image, "RGB"), restated: only mode "RGBA" goes
    through rgba_to_rgb (pasted over white, alpha as the mask); every other mode is convert."""
    if image.mode == "RGBA":
        converted = Image.new("RGB", image.size, (255, 255, 255))
        converted.paste(image, mask=image.split()[3])
        return converted
    return image.convert("RGB")


ALPHAS = [0, 1, 127, 128, 254, 255]


def alpha_pngs(rng, tmp):
    """RGBA (8- and 16-bit) and 16-bit gray+alpha: every colour value under each edge alpha
    (a row each), then rows of random alpha; 16-bit low bytes random (Pillow keeps the high)."""
    w, h = 256, len(ALPHAS) + 4
    alpha = np.concatenate([np.repeat(np.array(ALPHAS)[:, None], w, 1),
                            rng.integers(0, 256, (4, w))])
    colour = np.stack([np.tile(np.arange(w), (h, 1)), np.tile(255 - np.arange(w), (h, 1)),
                       rng.integers(0, 256, (h, w))], -1)
    rgba = np.concatenate([colour, alpha[..., None]], -1)
    path = os.path.join(tmp, "alpha_rgba8.png")
    Image.fromarray(rgba.astype(np.uint8), "RGBA").save(path)
    cases = [("png RGBA8 edge+random alpha", path)]
    wide = rgba * 256 + rng.integers(0, 256, rgba.shape)
    gray_alpha = wide[..., [0, 3]]
    for name, data in [("alpha_rgba16", png_bytes(w, h, 6, 16, wide)),
                       ("alpha_rgba16_adam7", png_bytes(w, h, 6, 16, wide, interlace=True)),
                       ("alpha_la16", png_bytes(w, h, 4, 16, gray_alpha)),
                       ("alpha_la8", png_bytes(w, h, 4, 8, gray_alpha // 256))]:
        path = os.path.join(tmp, name + ".png")
        with open(path, "wb") as f:
            f.write(data)
        cases.append((f"png {name} edge+random alpha", path))
    opaque = rgba.copy()
    opaque[..., 3] = 255
    path = os.path.join(tmp, "alpha_rgba8_opaque.png")
    Image.fromarray(opaque.astype(np.uint8), "RGBA").save(path)
    cases.append(("png RGBA8 all opaque", path))
    return cases


def check_decode(chk, tmp):
    rng = np.random.default_rng(7)
    cases = pillow_pngs(rng, tmp)
    for name, data in hand_made_pngs(rng):
        path = os.path.join(tmp, name + ".png")
        with open(path, "wb") as f:
            f.write(data)
        cases.append((f"png {name}", path))
    cases += alpha_pngs(rng, tmp) + jpegs(rng, tmp) + webps(rng, tmp)
    composited = 0  # cases where vLLM's pixels differ from convert's: the vLLM half is not vacuous
    for label, path in cases:
        with Image.open(path) as im:
            expected = im.convert("RGB")
            vllm = vllm_convert_image_mode(im)
            mode = im.mode
        chk.compare(label, path, expected)
        chk.compare(f"{label} [vllm, mode {mode}]", path, vllm, flags=["--vllm-alpha"])
        if vllm.tobytes() != expected.tobytes():
            composited += 1
            if mode != "RGBA":  # vLLM converts every other mode; a difference is a script bug
                chk.failures.append(f"{label}: mode {mode}, yet vLLM's pixels differ")
    print(f"vllm-alpha: {composited} cases composite differently from convert('RGB')")
    if composited == 0:
        chk.failures.append("vllm-alpha: no case had alpha to composite")


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("resize", "decode"):
        print(__doc__)
        return 2
    probe, part = sys.argv[1], sys.argv[2]
    print(f"Pillow {Image.__version__}, libjpeg {features.version('jpg')} "
          f"(turbo: {features.check('libjpeg_turbo')}), "
          f"libwebp {features.version('webp')}, zlib {features.version('zlib')}")
    with tempfile.TemporaryDirectory(prefix="cpm_pil_") as tmp:
        chk = Checker(probe, tmp)
        (check_resize if part == "resize" else check_decode)(chk, tmp)
    for failure in chk.failures:
        print("MISMATCH", failure)
    print(f"{part}: {chk.cases} cases, {chk.pixels} pixels compared, "
          f"{len(chk.failures)} mismatching")
    return 1 if chk.failures or chk.cases == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
