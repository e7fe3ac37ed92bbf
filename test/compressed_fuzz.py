"""Generated sensor_msgs/CompressedImage messages for the reliability suite, each with its verdict.

The verdict comes from how a case was built, never from the node's code: a good case is a JPEG
or PNG that compressed_image_transport (image_transport_plugins, humble) could have published,
under the format string its compressed_publisher.cpp writes for that image (or the older bare
"jpeg"/"png"); a bad case is one of those broken in one known way. Bad cases come in two kinds,
by what it takes to see the defect:

- AT_ARRIVAL: visible without decoding a pixel, from the format string, the codec's signature,
  where the data ends, the image header, or the amount of data:
  - format: sensor_msgs/CompressedImage (humble) accepts "jpeg", "png", "tiff"; image_transport
    writes "<encoding>; <jpeg|png|tiff> compressed [<pixel format>]" (the pixel format one of
    bgr8, rgb8, mono8, bgr16, rgb16, or none), compressed_depth_image_transport
    "<encoding>; compressedDepth [png|rvl]" (a depth map, not a camera image). Anything else is
    malformed, and a codec other than jpeg/png is not one the node decodes;
  - signature: a JPEG starts with SOI FF D8 FF (ITU-T T.81 B.1.1.3, JFIF), a PNG with its 8-byte
    signature (PNG spec 5.2); so a PNG under a "jpeg" format, or the reverse, is visible here;
  - end: a JPEG ends with EOI FF D9 (T.81 B.2.1; zero padding after it, as UVC cameras send, is
    allowed), a PNG with its IEND chunk ("shall be last", PNG spec 5.6): a cut or garbage after
    the end shows;
  - header: a JPEG's frame header (SOF) comes before its first scan (SOS), with a non-zero width
    and height and sampling factors 1–4 (T.81 B.2.2); a PNG's IHDR is its first chunk, 13 bytes,
    with a valid CRC and fields in the spec's ranges (PNG spec 11.2.2); every segment fits in the
    data; and the claimed size is at most `MAX_PIXELS` (the node's documented limit);
  - amount of data: in a Huffman-coded JPEG every 8×8 block of every component starts with a DC
    code of at least one bit (T.81 F.1.2.1, F.2.2.1), so scan data of fewer bits than the blocks
    of one component cannot hold the image its header claims (a huge claim with tiny data).
- BY_DECODING: the header and framing are right and the damage is inside the compressed stream
  (a PNG data chunk's CRC, the zlib stream, a row filter, a missing data chunk or table): only a
  decoder sees it. The node may count such a frame as dropped if a newer one displaces it before
  it is decoded; decoded, it must be rejected.

Damage a decoder cannot see is not generated: a JPEG's entropy-coded data carries no checksum
(libjpeg fills what is missing with grey and warns), and libpng only warns about an ancillary
chunk's CRC.

Adding a case: one function in `KINDS` that returns a `CompressedCase`; its verdict says which
of the three it is.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import cv2
import numpy as np
from image_fuzz import FRAME_IDS, pick_kinds

from openclaw_vision.preprocess.compressed import MAX_PIXELS

GOOD, AT_ARRIVAL, BY_DECODING = "good", "at_arrival", "by_decoding"

#: sensor_msgs/image_encodings.hpp (humble) isColor(): compressed as bgr8 (JPEG) / bgr8, bgr16 (PNG)
COLOUR_8 = ("rgb8", "bgr8", "rgba8", "bgra8")
COLOUR_16 = ("rgb16", "bgr16", "rgba16", "bgra16")
#: grey encodings: compressed as mono8 (JPEG) or unchanged (PNG, no pixel format after "compressed ")
GREY_8 = ("mono8", "8UC1")
GREY_16 = ("mono16", "16UC1")
BAYER_8 = ("bayer_rggb8", "bayer_bggr8", "bayer_gbrg8", "bayer_grbg8")

UNKNOWN_CODECS = ("tiff", "bmp", "webp", "gif", "h264", "jp2", "avif", "mjpeg", "rvl", "qoi", "raw", "jpeg2000")
MALFORMED_FORMATS = (
    "",
    "   ",
    "rgb8; jpeg",
    "rgb8; png",
    "rgb8; compressed bgr8",
    "; jpeg compressed bgr8",
    "rgb8; jpeg compressed bgr8; png compressed bgr8",
    "rgb8; jpeg compressed bgr8 bgr8",
    "rgb8: jpeg compressed bgr8",
    "rgb8; jpeg compresed bgr8",
    "rgb8; jpeg compressed bgr9",
    "rgb8; jpeg compressed xyz",
    "rgb8; jpeg compressed brg8",  # a typo: image_transport would read the channels as R,G,B
    "rgb8 bgr8; jpeg compressed bgr8",
    "rgb8\x00; jpeg compressed bgr8",
    "rgb8; jpeg compressed\x00bgr8",
    "rgb8; jpeg compressed bgr８",
    "jpeg compressed",
    "jpeg png",
    "compressed",
    ";",
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IEND = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))


@dataclass(frozen=True)
class CompressedCase:
    kind: str
    format: str
    data: bytes
    frame_id: str
    verdict: str

    @property
    def valid(self) -> bool:
        return self.verdict == GOOD

    def fields(self) -> dict:
        return {"format": self.format, "data": self.data}


# --- building blocks ----------------------------------------------------------------------------
def _pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def _size(rng: np.random.Generator) -> tuple[int, int]:
    """(height, width): mostly small, every few an edge: 1×1, one row or column, odd sides."""
    shape = int(rng.integers(6))
    if shape == 0:
        return 1, 1
    if shape == 1:
        return 1, int(rng.integers(1, 80))
    if shape == 2:
        return int(rng.integers(1, 80)), 1
    if shape == 3:
        return 2 * int(rng.integers(0, 40)) + 1, 2 * int(rng.integers(0, 40)) + 1
    return int(rng.integers(1, 97)), int(rng.integers(1, 129))


def _pixels(rng: np.random.Generator, h: int, w: int, channels: int, dtype=np.uint8) -> np.ndarray:
    """Noise, a gradient or one flat colour (the last compresses hardest)."""
    top = 65535 if dtype == np.uint16 else 255
    shape = (h, w) if channels == 1 else (h, w, channels)
    style = int(rng.integers(3))
    if style == 0:
        return rng.integers(0, top + 1, shape).astype(dtype)
    if style == 1:
        ramp = (np.add.outer(np.arange(h), np.arange(w)) * (top // max(1, h + w))).astype(dtype)
        return ramp if channels == 1 else np.repeat(ramp[:, :, None], channels, axis=2)
    return np.full(shape, rng.integers(0, top + 1), dtype)


def _imencode(ext: str, img: np.ndarray, params: list[int]) -> bytes:
    ok, buf = cv2.imencode(ext, img, params)
    assert ok, (ext, img.shape, params)
    return buf.tobytes()


def _jpeg(rng: np.random.Generator, img: np.ndarray) -> bytes:
    """OpenCV's JPEG writer (what compressed_publisher calls) with random quality, sampling, modes."""
    params = [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(1, 101))]
    if rng.random() < 0.3:
        params += [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]
    if rng.random() < 0.3:
        params += [cv2.IMWRITE_JPEG_OPTIMIZE, 1]  # image-specific Huffman tables: the shortest codes
    if rng.random() < 0.2:
        params += [cv2.IMWRITE_JPEG_RST_INTERVAL, int(rng.integers(1, 5))]
    if img.ndim == 3 and rng.random() < 0.5:
        factors = (cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
                   cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440)  # fmt: skip
        params += [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, _pick(rng, factors)]
    return _imencode(".jpg", img, params)


def _png(rng: np.random.Generator, img: np.ndarray) -> bytes:
    params = [cv2.IMWRITE_PNG_COMPRESSION, int(rng.integers(0, 10))]
    if rng.random() < 0.3:
        strategies = (cv2.IMWRITE_PNG_STRATEGY_FILTERED, cv2.IMWRITE_PNG_STRATEGY_HUFFMAN_ONLY,
                      cv2.IMWRITE_PNG_STRATEGY_RLE, cv2.IMWRITE_PNG_STRATEGY_FIXED)  # fmt: skip
        params += [cv2.IMWRITE_PNG_STRATEGY, _pick(rng, strategies)]
    return _imencode(".png", img, params)


def _other_png(rng: np.random.Generator, h: int, w: int) -> bytes:
    """A PNG that OpenCV does not write: palette (Pillow), 1-bit (Pillow) or 2/4-bit grey (built here)."""
    from PIL import Image

    style = int(rng.integers(4))
    if style == 3:
        depth = _pick(rng, (2, 4))
        per_byte = 8 // depth
        values = rng.integers(0, 1 << depth, (h, -(-w // per_byte) * per_byte), dtype=np.uint8)
        packed = np.zeros((h, values.shape[1] // per_byte), np.uint8)
        for k in range(per_byte):
            packed |= values[:, k::per_byte] << (8 - depth * (k + 1))
        rows = np.concatenate([np.zeros((h, 1), np.uint8), packed], axis=1)  # filter type 0 per row
        return png_build([(b"IHDR", ihdr(w, h, depth, 0)), (b"IDAT", zlib.compress(rows.tobytes())), (b"IEND", b"")])
    rgb = Image.fromarray(_pixels(rng, h, w, 3))
    img, opts = [(rgb.convert("P"), {}), (rgb.quantize(4), {"bits": 2}), (rgb.convert("1"), {})][style]
    out = io.BytesIO()
    img.save(out, "PNG", **opts)
    return out.getvalue()


def _any_jpeg(rng: np.random.Generator) -> tuple[str, bytes]:
    """A good (format, data) JPEG, as compressed_publisher writes it for a colour or grey image."""
    h, w = _size(rng)
    style = int(rng.integers(5))
    if style == 0:
        return "jpeg", _jpeg(rng, _pixels(rng, h, w, _pick(rng, (1, 3))))  # the older bare format
    if style == 1:
        return f"{_pick(rng, GREY_8 + GREY_16 + BAYER_8)}; jpeg compressed mono8", _jpeg(rng, _pixels(rng, h, w, 1))
    if style == 2:  # older publishers compressed RGB without swapping ("compressed rgb8")
        return f"{_pick(rng, COLOUR_8)}; jpeg compressed rgb8", _jpeg(rng, _pixels(rng, h, w, 3))
    return f"{_pick(rng, COLOUR_8 + COLOUR_16)}; jpeg compressed bgr8", _jpeg(rng, _pixels(rng, h, w, 3))


def _any_png(rng: np.random.Generator) -> tuple[str, bytes]:
    """A good (format, data) PNG: colour as bgr8/bgr16, grey (and Bayer mosaics) unchanged."""
    h, w = _size(rng)
    style = int(rng.integers(7))
    if style == 0:
        return "png", _png(rng, _pixels(rng, h, w, _pick(rng, (1, 3))))
    if style == 1:
        return "png", _other_png(rng, h, w)
    if style == 2:
        return f"{_pick(rng, GREY_8)}; png compressed ", _png(rng, _pixels(rng, h, w, 1))
    if style == 3:
        return f"{_pick(rng, GREY_16)}; png compressed ", _png(rng, _pixels(rng, h, w, 1, np.uint16))
    if style == 4:
        return f"{_pick(rng, COLOUR_16)}; png compressed bgr16", _png(rng, _pixels(rng, h, w, 3, np.uint16))
    if style == 5:
        return f"{_pick(rng, BAYER_8)}; png compressed ", _png(rng, _pixels(rng, h, w, 1))
    return f"{_pick(rng, COLOUR_8)}; png compressed bgr8", _png(rng, _pixels(rng, h, w, 3))


def _any_image(rng: np.random.Generator) -> tuple[str, bytes, str]:
    """(format, data, codec) of a good JPEG or PNG."""
    if rng.random() < 0.5:
        return (*_any_jpeg(rng), "jpeg")
    return (*_any_png(rng), "png")


def _random_bytes(rng: np.random.Generator, lo: int, hi: int) -> bytes:
    return rng.integers(0, 256, int(rng.integers(lo, hi)), dtype=np.uint8).tobytes()


def _garbage_tail(rng: np.random.Generator) -> bytes:
    """Random bytes that do not end in a zero (padding) or in an end marker."""
    tail = bytearray(_random_bytes(rng, 1, 200))
    tail[-1] = int(rng.integers(1, 256)) if tail[-1] in (0, 0xD9) else tail[-1]
    while tail.endswith(IEND[-4:]):
        tail[-1] ^= 0x01
    return bytes(tail)


# --- PNG and JPEG surgery (on well-formed files from the encoders above) -------------------------------
def png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """[(type, payload)] of a well-formed PNG."""
    out, off = [], len(PNG_SIGNATURE)
    while off < len(data):
        (n,) = struct.unpack(">I", data[off : off + 4])
        out.append((data[off + 4 : off + 8], data[off + 8 : off + 8 + n]))
        off += 12 + n
    return out


def png_chunk(kind: bytes, payload: bytes, crc: int | None = None) -> bytes:
    crc = zlib.crc32(kind + payload) if crc is None else crc
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def png_build(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return PNG_SIGNATURE + b"".join(png_chunk(k, p) for k, p in chunks)


def ihdr(width: int, height: int, depth: int = 8, colour: int = 2, compression=0, filt=0, interlace=0) -> bytes:
    return struct.pack(">IIBBBBB", width, height, depth, colour, compression, filt, interlace)


def jpeg_segments(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """([(marker, payload)] up to and including the first SOS, the bytes after that SOS segment)."""
    segs, off = [], 2
    while True:
        marker = data[off + 1]
        (n,) = struct.unpack(">H", data[off + 2 : off + 4])
        segs.append((marker, data[off + 4 : off + 2 + n]))
        off += 2 + n
        if marker == 0xDA:
            return segs, data[off:]


def jpeg_build(segs: list[tuple[int, bytes]], rest: bytes) -> bytes:
    return b"\xff\xd8" + b"".join(bytes([0xFF, m]) + struct.pack(">H", len(p) + 2) + p for m, p in segs) + rest


def _sof_index(segs) -> int:
    return next(i for i, (m, _) in enumerate(segs) if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC))


def _small_jpeg(rng: np.random.Generator) -> bytes:
    h, w = int(rng.integers(8, 33)), int(rng.integers(8, 33))
    return _jpeg(rng, _pixels(rng, h, w, _pick(rng, (1, 3))))


def _colour_jpeg_format(rng) -> str:
    return _pick(rng, ("jpeg", "rgb8; jpeg compressed bgr8", "bgr8; jpeg compressed bgr8"))


def _png_format(rng) -> str:
    return _pick(rng, ("png", "rgb8; png compressed bgr8", "mono8; png compressed "))


def _small_png(rng: np.random.Generator, channels: int | None = None) -> bytes:
    h, w = int(rng.integers(2, 33)), int(rng.integers(2, 33))
    return _png(rng, _pixels(rng, h, w, channels or _pick(rng, (1, 3))))


# --- good ---------------------------------------------------------------------------------------
def _case(kind: str, fmt: str, data: bytes, verdict: str) -> CompressedCase:
    return CompressedCase(kind, fmt, data, "", verdict)


def good_jpeg(rng):
    return _case("good_jpeg", *_any_jpeg(rng), GOOD)


def good_png(rng):
    return _case("good_png", *_any_png(rng), GOOD)


def good_flat(rng):
    """One colour, up to 512×512, at the lowest quality with optimised tables: the fewest bits per block."""
    h, w = int(rng.integers(64, 513)), int(rng.integers(64, 513))
    img = np.full((h, w, 3), rng.integers(0, 256, 3), np.uint8)
    params = [cv2.IMWRITE_JPEG_QUALITY, 1, cv2.IMWRITE_JPEG_OPTIMIZE, 1]
    params += [cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if rng.random() < 0.5 else []
    if rng.random() < 0.5:
        return _case("good_flat", "bgr8; png compressed bgr8", _imencode(".png", img, [cv2.IMWRITE_PNG_COMPRESSION, 9]),
                     GOOD)  # fmt: skip
    return _case("good_flat", "bgr8; jpeg compressed bgr8", _imencode(".jpg", img, params), GOOD)


def good_padded_jpeg(rng):
    """A UVC camera's MJPEG buffer: the JPEG, then zeros to the end of the buffer."""
    fmt, data = _any_jpeg(rng)
    return _case("good_padded_jpeg", fmt, data + bytes(int(rng.integers(1, 5000))), GOOD)


# --- bad, visible at arrival ---------------------------------------------------------------------
def empty(rng):
    return _case("empty", _any_image(rng)[0], b"", AT_ARRIVAL)


def random_bytes(rng):
    """Bytes that are no image, under a jpeg or png format (they never start with either signature)."""
    data = bytearray(_random_bytes(rng, 1, 4096))
    data[0] = data[0] if data[0] not in (0xFF, 0x89) else 0
    return _case("random_bytes", _any_image(rng)[0], bytes(data), AT_ARRIVAL)


def codec_swapped(rng):
    """A good PNG under a jpeg format string, or a good JPEG under a png one."""
    if rng.random() < 0.5:
        return _case("codec_swapped", _any_jpeg(rng)[0], _any_png(rng)[1], AT_ARRIVAL)
    return _case("codec_swapped", _any_png(rng)[0], _any_jpeg(rng)[1], AT_ARRIVAL)


def truncated_jpeg(rng):
    """Cut inside the scan data (no EOI: entropy-coded data never holds FF D9), sometimes zero-padded."""
    fmt, data = _any_jpeg(rng)
    head = len(data) - len(jpeg_segments(data)[1])
    cut = data[: int(rng.integers(head, len(data) - 1))]
    return _case("truncated_jpeg", fmt, cut + bytes(int(rng.integers(0, 3)) * 100), AT_ARRIVAL)


def truncated_png(rng):
    fmt, data = _any_png(rng)
    return _case("truncated_png", fmt, data[: int(rng.integers(1, len(data)))], AT_ARRIVAL)


def jpeg_trailing_garbage(rng):
    fmt, data = _any_jpeg(rng)
    return _case("jpeg_trailing_garbage", fmt, data + _garbage_tail(rng), AT_ARRIVAL)


def png_trailing_garbage(rng):
    fmt, data = _any_png(rng)
    return _case("png_trailing_garbage", fmt, data + _garbage_tail(rng), AT_ARRIVAL)


def unknown_codec(rng):
    """Good JPEG/PNG bytes, or an image OpenCV writes in another codec, under a codec the node does not decode."""
    codec = _pick(rng, UNKNOWN_CODECS)
    fmt = codec if rng.random() < 0.5 else f"{_pick(rng, COLOUR_8)}; {codec} compressed bgr8"
    other = {"tiff": ".tiff", "bmp": ".bmp", "webp": ".webp", "jp2": ".jp2"}.get(codec)
    data = _imencode(other, _pixels(rng, 64, 64, 3), []) if other and rng.random() < 0.5 else _any_image(rng)[1]
    return _case("unknown_codec", fmt, data, AT_ARRIVAL)


def compressed_depth(rng):
    """compressed_depth_image_transport's message: a 12-byte header, then a PNG of a 16-bit depth map."""
    fmt = _pick(rng, ("16UC1; compressedDepth", "16UC1; compressedDepth png", "32FC1; compressedDepth png",
                      "16UC1; compressedDepth rvl"))  # fmt: skip
    depth = _png(rng, _pixels(rng, 24, 32, 1, np.uint16))
    return _case("compressed_depth", fmt, struct.pack("<iff", 0, 0.0, 0.0) + depth, AT_ARRIVAL)


def malformed_format(rng):
    fmt = _pick(rng, MALFORMED_FORMATS)
    return _case("malformed_format", fmt, _any_image(rng)[1], AT_ARRIVAL)


def png_bad_ihdr(rng):
    """IHDR fields out of the spec's ranges (its CRC made right), or IHDR not the first chunk."""
    chunks = png_chunks(_small_png(rng))
    w, h = struct.unpack(">II", chunks[0][1][:8])
    bad = _pick(rng, (ihdr(0, h), ihdr(w, 0), ihdr(2**31, h), ihdr(w, 2**32 - 1), ihdr(w, h, 3, 2), ihdr(w, h, 16, 3),
                      ihdr(w, h, 8, 5), ihdr(w, h, 8, 2, compression=1), ihdr(w, h, 8, 2, filt=1),
                      ihdr(w, h, 8, 2, interlace=2), None))  # fmt: skip
    if bad is None:  # IHDR after another chunk
        return _case("png_bad_ihdr", _png_format(rng), png_build([(b"tEXt", b"k\x00v"), *chunks]), AT_ARRIVAL)
    return _case("png_bad_ihdr", _png_format(rng), png_build([(b"IHDR", bad), *chunks[1:]]), AT_ARRIVAL)


def png_ihdr_crc(rng):
    data = bytearray(_small_png(rng))
    data[29 + int(rng.integers(4))] ^= 1 << int(rng.integers(8))  # IHDR's CRC: bytes 29-32
    return _case("png_ihdr_crc", _png_format(rng), bytes(data), AT_ARRIVAL)


def png_huge_claim(rng):
    """An IHDR that claims more than MAX_PIXELS (up to 2^31 - 1 a side) over a small image's data."""
    chunks = png_chunks(_small_png(rng))
    w = int(rng.integers(1, 2**31))
    h = int(rng.integers(MAX_PIXELS // w + 1, 2**31)) if MAX_PIXELS // w + 1 < 2**31 else 2**31 - 1
    w, h = (w, h) if rng.random() < 0.5 else (h, w)
    depth, colour = _pick(rng, ((8, 2), (16, 6), (8, 0), (1, 0)))
    return _case("png_huge_claim", _png_format(rng), png_build([(b"IHDR", ihdr(w, h, depth, colour)), *chunks[1:]]),
                 AT_ARRIVAL)  # fmt: skip


def _with_sof(data: bytes, height: int, width: int, factors: int | None = None) -> bytes:
    segs, rest = jpeg_segments(data)
    i = _sof_index(segs)
    marker, p = segs[i]
    body = bytearray(p[:1] + struct.pack(">HH", height, width) + p[5:])
    if factors is not None:
        body[6 + 1] = factors  # the first component's H,V sampling factors
    segs[i] = (marker, bytes(body))
    return jpeg_build(segs, rest)


def jpeg_huge_claim(rng):
    """A frame header that claims a large image over an 8-16 pixel image's scan data: either more than
    MAX_PIXELS (up to 65535×65535), or 2048-4096 a side: more 8×8 blocks than the scan data has bits
    (each block's DC code is at least one bit)."""
    data = _jpeg(rng, _pixels(rng, int(rng.integers(8, 17)), int(rng.integers(8, 17)), _pick(rng, (1, 3))))
    if rng.random() < 0.5:
        h = int(rng.integers(MAX_PIXELS // 65535 + 1, 65536))
        w = int(rng.integers(MAX_PIXELS // h + 1, 65536))
    else:
        h, w = int(rng.integers(2048, 4097)), int(rng.integers(2048, 4097))
        assert 8 * len(jpeg_segments(data)[1]) < (h // 8) * (w // 8)  # what this kind is
    return _case("jpeg_huge_claim", _colour_jpeg_format(rng), _with_sof(data, h, w), AT_ARRIVAL)


def jpeg_bad_frame_header(rng):
    """Zero width or height (the DNL marker is not supported), sampling factors outside 1-4, no SOF before
    the first scan, no scan before EOI, or a segment that runs past the end of the data."""
    data = _small_jpeg(rng)
    segs, rest = jpeg_segments(data)
    how = int(rng.integers(6))
    if how == 0:
        bad = _with_sof(data, 0, 16)
    elif how == 1:
        bad = _with_sof(data, 16, 0)
    elif how == 2:
        bad = _with_sof(data, 16, 16, factors=_pick(rng, (0x01, 0x10, 0x00, 0x51, 0x15)))
    elif how == 3:
        bad = jpeg_build([s for s in segs if s is not segs[_sof_index(segs)]], rest)
    elif how == 4:
        bad = jpeg_build(segs[:-1], b"") + b"\xff\xd9"
    else:
        i = int(rng.integers(len(segs)))
        m, p = segs[i]
        head = jpeg_build(segs[:i], b"") + bytes([0xFF, m]) + struct.pack(">H", 0xFFFF)
        bad = head + p[: int(rng.integers(0, len(p) + 1))] + b"\xff\xd9"
    return _case("jpeg_bad_frame_header", _colour_jpeg_format(rng), bad, AT_ARRIVAL)


# --- bad, visible only by decoding ----------------------------------------------------------------------
def png_data_crc(rng):
    chunks = png_chunks(_small_png(rng))
    i = next(i for i, (k, _) in enumerate(chunks) if k == b"IDAT")
    data = bytearray(png_build(chunks))
    end = len(PNG_SIGNATURE) + sum(12 + len(p) for _, p in chunks[: i + 1])
    data[end - 1 - int(rng.integers(4))] ^= 1 << int(rng.integers(8))
    return _case("png_data_crc", _png_format(rng), bytes(data), BY_DECODING)


def _replace_idat(chunks, payload: bytes) -> list[tuple[bytes, bytes]]:
    out = [c for c in chunks if c[0] != b"IDAT"]
    return [*out[:-1], (b"IDAT", payload), out[-1]] if payload is not None else out


def png_bad_zlib(rng):
    """The data's zlib header broken (CRC made right): not a deflate stream."""
    chunks = png_chunks(_small_png(rng))
    idat = b"".join(p for k, p in chunks if k == b"IDAT")
    head = _pick(rng, (b"\x00\x00", b"\x78\x00", b"\xff\xff", b"\x78\x20"))
    return _case("png_bad_zlib", _png_format(rng), png_build(_replace_idat(chunks, head + idat[2:])), BY_DECODING)


def png_bad_filter(rng):
    """Rows with a filter type above 4 (PNG spec 9.2), in a valid zlib stream."""
    h, w, channels = int(rng.integers(1, 33)), int(rng.integers(1, 33)), _pick(rng, (1, 3))
    rows = rng.integers(0, 256, (h, 1 + w * channels), dtype=np.uint8)
    rows[:, 0] = rng.integers(0, 5, h)
    rows[int(rng.integers(h)), 0] = int(rng.integers(5, 256))
    chunks = [(b"IHDR", ihdr(w, h, 8, 2 if channels == 3 else 0)), (b"IDAT", zlib.compress(rows.tobytes())),
              (b"IEND", b"")]  # fmt: skip
    return _case("png_bad_filter", _png_format(rng), png_build(chunks), BY_DECODING)


def png_short_data(rng):
    """An IHDR that claims more rows or columns (≤ 4096 a side) than its data holds."""
    chunks = png_chunks(_small_png(rng))
    w, h, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    w2, h2 = (int(rng.integers(w + 1, 4097)), h) if rng.random() < 0.5 else (w, int(rng.integers(h + 1, 4097)))
    chunks[0] = (b"IHDR", ihdr(w2, h2, depth, colour))
    return _case("png_short_data", _png_format(rng), png_build(chunks), BY_DECODING)


def png_missing_data(rng):
    """No IDAT chunk, or the last one cut (its declared length then runs into IEND), IEND still last."""
    chunks = png_chunks(_small_png(rng))
    if rng.random() < 0.5:
        return _case("png_missing_data", _png_format(rng), png_build(_replace_idat(chunks, None)), BY_DECODING)
    data = png_build(chunks)
    cut = data[: int(rng.integers(len(data) - len(IEND) - 4 - len(chunks[-2][1]) // 2, len(data) - len(IEND)))]
    return _case("png_missing_data", _png_format(rng), cut + IEND, BY_DECODING)


def jpeg_missing_table(rng):
    """No quantisation table, a Huffman table whose code counts overflow its code lengths, or a
    quantisation table with an id above 3 (T.81 B.2.4.1, B.2.4.2)."""
    h, w = int(rng.integers(8, 33)), int(rng.integers(8, 33))
    data = _imencode(".jpg", _pixels(rng, h, w, 3), [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(1, 101))])
    segs, rest = jpeg_segments(data)
    how = int(rng.integers(3))
    if how == 0:
        segs = [s for s in segs if s[0] != 0xDB]
    elif how == 1:  # a DHT whose code counts add up to more codes than its lengths allow
        i = next(i for i, s in enumerate(segs) if s[0] == 0xC4)
        segs[i] = (0xC4, segs[i][1][:1] + b"\x03" + b"\xff" * 15 + segs[i][1][17:])
    else:  # a DQT for a table id above 3
        i = next(i for i, s in enumerate(segs) if s[0] == 0xDB)
        segs[i] = (0xDB, bytes([segs[i][1][0] | 0x07]) + segs[i][1][1:])
    return _case("jpeg_missing_table", _colour_jpeg_format(rng), jpeg_build(segs, rest), BY_DECODING)


def jpeg_bad_scan_header(rng):
    """A scan header that names a component the frame does not have, or no component at all."""
    data = _small_jpeg(rng)
    segs, rest = jpeg_segments(data)
    p = bytearray(segs[-1][1])
    if rng.random() < 0.5:
        p[1] = 0xEE  # the first scan component's id
    else:
        p[0] = 0
    segs[-1] = (0xDA, bytes(p))
    return _case("jpeg_bad_scan_header", _colour_jpeg_format(rng), jpeg_build(segs, rest), BY_DECODING)


#: kind → (generator, weight)
KINDS: dict[str, tuple[Callable[[np.random.Generator], CompressedCase], float]] = {
    "good_jpeg": (good_jpeg, 24),
    "good_png": (good_png, 20),
    "good_flat": (good_flat, 2),
    "good_padded_jpeg": (good_padded_jpeg, 3),
    "empty": (empty, 3),
    "random_bytes": (random_bytes, 4),
    "codec_swapped": (codec_swapped, 4),
    "truncated_jpeg": (truncated_jpeg, 4),
    "truncated_png": (truncated_png, 4),
    "jpeg_trailing_garbage": (jpeg_trailing_garbage, 3),
    "png_trailing_garbage": (png_trailing_garbage, 3),
    "unknown_codec": (unknown_codec, 3),
    "compressed_depth": (compressed_depth, 2),
    "malformed_format": (malformed_format, 4),
    "png_bad_ihdr": (png_bad_ihdr, 3),
    "png_ihdr_crc": (png_ihdr_crc, 2),
    "png_huge_claim": (png_huge_claim, 3),
    "jpeg_huge_claim": (jpeg_huge_claim, 3),
    "jpeg_bad_frame_header": (jpeg_bad_frame_header, 3),
    "png_data_crc": (png_data_crc, 2),
    "png_bad_zlib": (png_bad_zlib, 2),
    "png_bad_filter": (png_bad_filter, 2),
    "png_short_data": (png_short_data, 2),
    "png_missing_data": (png_missing_data, 2),
    "jpeg_missing_table": (jpeg_missing_table, 2),
    "jpeg_bad_scan_header": (jpeg_bad_scan_header, 2),
}


def _named(case: CompressedCase, rng: np.random.Generator) -> CompressedCase:
    return CompressedCase(**{**case.__dict__, "frame_id": _pick(rng, FRAME_IDS)})


def generate(n: int, seed: int = 0) -> Iterator[CompressedCase]:
    """`n` cases, every kind at least once, in a seeded random order; the last one good."""
    rng = np.random.default_rng(seed)
    for kind in pick_kinds(KINDS, n, rng, "good_jpeg"):
        yield _named(KINDS[kind][0](rng), rng)


def by_decoding(per_kind: int, seed: int = 0) -> list[CompressedCase]:
    """`per_kind` cases of every kind whose defect only a decoder sees (the lockstep phase)."""
    rng = np.random.default_rng(seed)
    kinds = [k for k, (make, _) in KINDS.items() if make(np.random.default_rng(0)).verdict == BY_DECODING]
    return [_named(KINDS[k][0](rng), rng) for k in kinds for _ in range(per_kind)]
