"""JPEG and PNG structure, read without decoding a pixel: can these bytes be the image they claim?

Run on the transport thread when a CompressedImage arrives, so that a frame no decoder could
turn into its claimed image is rejected at once (and counted), before it takes the newest-frame
slot and a decode; and so that no frame makes the decoder allocate for an image far larger than
its data: libjpeg fills missing scan data with grey, so a 600-byte JPEG whose header claims
30000×30000 pixels decodes to 2.7 GB. Damage inside the compressed stream (a zlib stream, a
Huffman table, a chunk's CRC other than IHDR's) is left to the decoder: seeing it means decoding.

JPEG: ITU-T T.81 (B.1.1 markers, B.2.2 frame header, F.1.2.1 DC coding). PNG: the PNG
specification (5.2 signature, 5.3 chunk layout, 5.6 chunk order, 11.2.2 IHDR).
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import numpy as np

from .encodings import FrameError

JPEG_SOI = b"\xff\xd8\xff"
JPEG_EOI = b"\xff\xd9"
#: zero padding after a JPEG's EOI that we look past (UVC cameras pad MJPEG buffers)
JPEG_TAIL = 65536
#: frame header (SOFn) markers, T.81 table B.1: C0–CF except DHT (C4), JPG (C8) and DAC (CC)
JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: SOFs whose scans are Huffman-coded DCT (baseline, extended, progressive): every 8×8 block of a
#: component starts with a DC code of at least one bit (T.81 F.1.2.1, F.2.2.1). Arithmetic coding
#: can spend less than a bit per block, and lossless modes have no blocks, so the rule skips them.
JPEG_HUFFMAN_DCT = frozenset({0xC0, 0xC1, 0xC2})
#: markers without a length field (T.81 B.1.1.3): TEM and RST0–7
JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
JPEG_SOS = 0xDA

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: the whole IEND chunk: length 0, type, CRC of the type; it "shall be last" (PNG spec 5.6)
PNG_IEND = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
#: allowed bit depths per colour type (PNG spec 11.2.2, table 11.1)
PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
PNG_MAX_SIDE = 2**31 - 1  # a PNG four-byte unsigned integer is at most 2^31 - 1 (PNG spec 7.1)


class JpegFrame(NamedTuple):
    """What a JPEG frame header (SOFn, T.81 B.2.2) says about the image."""

    marker: int
    width: int
    height: int
    factors: list[tuple[int, int]]  # (H, V) sampling factors per component


def check_jpeg(data: np.ndarray, max_pixels: int) -> tuple[int, int]:
    """(width, height) of a JPEG whose framing, frame header and amount of data are plausible; else FrameError.

    Walks the marker segments from SOI to the first scan (SOS): each must fit in the data, and a
    frame header (SOF) must come first. The scan data itself is not read, only measured.
    """
    head = bytes(data[:8])
    if not head.startswith(JPEG_SOI):
        raise FrameError(f"corrupt jpeg: {data.size} bytes that do not start with a JPEG SOI marker ({head.hex()})")
    eoi = _jpeg_eoi(data)
    mv = memoryview(data)
    off, frame = 2, None
    while True:
        if off + 2 > eoi:
            raise FrameError(f"corrupt jpeg: the headers run into the EOI marker at byte {eoi}: no scan (SOS)")
        if mv[off] != 0xFF:
            raise FrameError(f"corrupt jpeg: byte {off} is {mv[off]:#04x} where a marker (FF xx) should start")
        marker = mv[off + 1]
        if marker == 0xFF:  # fill byte before a marker (T.81 B.1.1.2)
            off += 1
            continue
        if marker in JPEG_STANDALONE:
            off += 2
            continue
        if marker in (0xD8, 0xD9):
            name = "SOI" if marker == 0xD8 else "EOI"
            raise FrameError(f"corrupt jpeg: an {name} marker at byte {off}, before any scan (SOS)")
        length = struct.unpack_from(">H", mv, off + 2)[0] if off + 4 <= eoi else 0
        end = off + 2 + length
        if length < 2 or end > eoi:
            raise FrameError(f"corrupt jpeg: the FF{marker:02X} segment at byte {off} runs past the end of the data")
        if marker in JPEG_SOF:
            if frame is not None:
                raise FrameError(f"corrupt jpeg: a second frame header (FF{marker:02X}) at byte {off}")
            frame = _frame_header(marker, mv[off + 4 : end], max_pixels)
        elif marker == JPEG_SOS:
            if frame is None:
                raise FrameError(f"corrupt jpeg: a scan (SOS) at byte {off} before any frame header (SOF)")
            _check_amount_of_data(frame, eoi - end)
            return frame.width, frame.height
        off = end


def _jpeg_eoi(data: np.ndarray) -> int:
    """Offset of the EOI marker that ends the data, after any zero padding; FrameError if there is none."""
    tail = data[-JPEG_TAIL:]
    nz = np.flatnonzero(tail)
    end = int(nz[-1]) + 1 if nz.size else 0
    if end < 2 or data.size < 4 or bytes(tail[end - 2 : end]) != JPEG_EOI:
        raise FrameError(f"corrupt jpeg: {data.size} bytes without an EOI marker at the end (truncated?)")
    return data.size - tail.size + end - 2


def _frame_header(marker: int, p: memoryview, max_pixels: int) -> JpegFrame:
    """The frame header in a SOF segment's payload `p` (after its length), checked."""
    components = p[5] if len(p) > 5 else 0
    if components == 0 or len(p) != 6 + 3 * components:
        raise FrameError(f"corrupt jpeg: a frame header of {len(p) + 2} bytes for {components} components")
    height, width = struct.unpack_from(">HH", p, 1)
    if height == 0 or width == 0:  # height 0 means "see DNL after the first scan": libjpeg does not support it
        raise FrameError(f"corrupt jpeg: the frame header claims {width}×{height} pixels")
    factors = [(p[7 + 3 * i] >> 4, p[7 + 3 * i] & 0x0F) for i in range(components)]
    if any(not (1 <= h <= 4 and 1 <= v <= 4) for h, v in factors):
        raise FrameError(f"corrupt jpeg: sampling factors {factors} outside 1-4")
    check_pixels("jpeg", width, height, max_pixels)
    return JpegFrame(marker, width, height, factors)


def _check_amount_of_data(frame: JpegFrame, scan_bytes: int) -> None:
    """Scan data of fewer bits than the 8×8 blocks of its smallest component cannot hold the image.

    `scan_bytes` (first scan to EOI) over-counts the coded bits (later scans' headers, byte
    stuffing, restart markers), so the rule never refuses a real image.
    """
    marker, width, height, factors = frame
    if marker not in JPEG_HUFFMAN_DCT:
        return
    hmax, vmax = max(h for h, _ in factors), max(v for _, v in factors)
    # a component's size is ceil(X·H/Hmax) × ceil(Y·V/Vmax) samples (T.81 A.1.1), in blocks of 8×8
    blocks = min(
        _ceil_div(_ceil_div(width * h, hmax), 8) * _ceil_div(_ceil_div(height * v, vmax), 8) for h, v in factors
    )
    if 8 * scan_bytes < blocks:
        raise FrameError(
            f"corrupt jpeg: {scan_bytes} bytes of scan data cannot hold {width}×{height} pixels "
            f"({blocks} blocks of 8×8, at least one bit each)"
        )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_png(data: np.ndarray, max_pixels: int) -> tuple[int, int]:
    """(width, height) of a PNG whose signature, IHDR and final IEND are right; else FrameError.

    Only the first and the last chunk are read: a chunk walk in between would find what libpng
    finds anyway, and costs a Python loop per chunk on the transport thread.
    """
    if data.size < len(PNG_SIGNATURE) + 25 + len(PNG_IEND):
        raise FrameError(f"corrupt png: {data.size} bytes, too few for a signature, an IHDR and an IEND chunk")
    head = bytes(data[:8])
    if head != PNG_SIGNATURE:
        raise FrameError(f"corrupt png: {data.size} bytes that do not start with the PNG signature ({head.hex()})")
    if bytes(data[-len(PNG_IEND) :]) != PNG_IEND:
        raise FrameError(f"corrupt png: {data.size} bytes that do not end with an IEND chunk (truncated?)")
    mv = memoryview(data)
    length, kind = struct.unpack_from(">I4s", mv, 8)
    if kind != b"IHDR" or length != 13:
        raise FrameError(f"corrupt png: the first chunk is {bytes(kind)!r} of {length} bytes, not a 13-byte IHDR")
    if zlib.crc32(mv[12:29]) != struct.unpack_from(">I", mv, 29)[0]:
        raise FrameError("corrupt png: the IHDR chunk's CRC does not match")
    width, height, depth, colour, compression, filter_method, interlace = struct.unpack_from(">IIBBBBB", mv, 16)
    if not (0 < width <= PNG_MAX_SIDE and 0 < height <= PNG_MAX_SIDE):
        raise FrameError(f"corrupt png: IHDR claims {width}×{height} pixels")
    if depth not in PNG_DEPTHS.get(colour, ()):
        raise FrameError(f"corrupt png: IHDR has colour type {colour} with bit depth {depth}, not a PNG combination")
    if compression != 0 or filter_method != 0 or interlace > 1:
        raise FrameError(
            f"corrupt png: IHDR methods compression={compression} filter={filter_method} interlace={interlace} "
            "(PNG defines 0, 0, 0 or 1)"
        )
    check_pixels("png", width, height, max_pixels)
    return width, height


def check_pixels(codec: str, width: int, height: int, max_pixels: int) -> None:
    """The node's size limit, checked before any decoder allocates width × height pixels."""
    if width * height > max_pixels:
        raise FrameError(f"{codec} of {width}×{height} pixels: more than the node's limit of {max_pixels} pixels")
