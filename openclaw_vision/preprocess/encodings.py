"""Raw sensor_msgs/Image pixel layouts → a validated uint8 view, and the one definition of how each becomes RGB.

A camera driver's bytes are trusted for nothing: the sizes, the row `step` and the encoding
are checked against each other and a wrong one raises `FrameError` with what was wrong, so a
node can count and log it instead of crashing or encoding garbage.

This table is the specification that every implementation follows (the OpenCV path here,
the CUDA kernel in preprocess/cuda/, the fuzz tests). `W`, `H` are the message's `width` and
`height`, `step` its row length in bytes; rows may carry padding (`step` > the bytes a row
needs); the data holds exactly `step × rows` bytes (sensor_msgs/Image: "size is (step * rows)").

| encoding          | B/px | buffer rows | sizes      | → RGB (uint8)                                            |
|-------------------|------|-------------|------------|----------------------------------------------------------|
| rgb8              | 3    | H           |            | channels as they are                                     |
| bgr8, 8UC3        | 3    | H           |            | channels reversed                                        |
| rgba8, bgra8      | 4    | H           |            | alpha dropped (R, G, B picked by index)                  |
| mono8, 8UC1       | 1    | H           |            | R = G = B = value                                        |
| mono16, 16UC1     | 2    | H           |            | v = the 16-bit sample, big-endian if `is_bigendian` is 1 |
|                   |      |             |            | else little-endian; value8 = round(v / 257) (no ties     |
|                   |      |             |            | exist: equal to (v + 128) // 257); then as mono8         |
| yuv422, uyvy      | 2    | H           | W even     | U0 Y0 V0 Y1 per pixel pair; COLOR_YUV2RGB_UYVY           |
| yuv422_yuy2, yuyv | 2    | H           | W even     | Y0 U0 Y1 V0 per pixel pair; COLOR_YUV2RGB_YUY2           |
| nv12              | 1    | H × 3/2     | W, H even  | luma: H rows of `step` bytes; then H/2 rows (same step)  |
|                   |      |             |            | of interleaved U,V, one pair per 2×2 block;              |
|                   |      |             |            | COLOR_YUV2RGB_NV12                                       |
| nv21              | 1    | H × 3/2     | W, H even  | as nv12 with V,U order; COLOR_YUV2RGB_NV21               |
| bayer_rggb8       | 1    | H           |            | OpenCV bilinear demosaic, COLOR_BayerBG2RGB              |
| bayer_bggr8       | 1    | H           |            | COLOR_BayerRG2RGB                                        |
| bayer_gbrg8       | 1    | H           |            | COLOR_BayerGR2RGB                                        |
| bayer_grbg8       | 1    | H           |            | COLOR_BayerGB2RGB                                        |

YUV colour (yuv422 and nv12/nv21) is OpenCV's: BT.601, limited ("studio") range, Y in 16–235,
chroma centred on 128: R = 1.164(Y−16) + 1.596(V−128), G = 1.164(Y−16) − 0.813(V−128) −
0.391(U−128), B = 1.164(Y−16) + 2.018(U−128), in OpenCV's fixed point (within one level of the
float formula). nv12/nv21 chroma is nearest (each U,V pair colours its 2×2 block, no
interpolation), as OpenCV does it.

Bayer: ROS names a pattern by its first two pixels of the first row; OpenCV's COLOR_Bayer codes
name the second row's second and third pixels. So rggb8 is OpenCV's "BG", exactly as cv_bridge
maps them (ros-perception/vision_opencv, humble, cv_bridge/src/cv_bridge.cpp,
getConversionCode: BAYER_RGGB → COLOR_BayerBG2RGB, BGGR → RG, GBRG → GR, GRBG → GB; OpenCV 5 also
names these COLOR_BayerRGGB2RGB etc., the same codes). The demosaic is OpenCV's default bilinear one, over
the whole frame (border pixels as OpenCV fills them); the CPU path demosaics only the crop it
keeps plus a 2-pixel margin, which gives the same pixels (tested).

mono16 → 8 bits is linear over the full range (0 → 0, 65535 → 255), the scaling cv_bridge
applies for a 16 → 8 bit conversion (`convertTo(…, 255/65535)`, rounded); a depth camera's
`16UC1` in millimetres therefore looks nearly black: it is accepted, not rescaled to its content.

Names: Humble's sensor_msgs/image_encodings.hpp (ros2/common_interfaces, humble) defines every
name above except `uyvy`, `yuyv` (rolling's names for yuv422/yuv422_yuy2) and `nv12`; it
defines `nv21` (and `nv24`, not supported here) without saying how height and step apply
(its numChannels() says 2 for nv21, which no NV21 buffer matches), and Humble's cv_bridge
cannot convert nv21 at all (getCvType: "Unrecognized image encoding"). We follow the V4L2
single-plane layout the header links to (kernel docs, pixfmt-yuv-planar NV12/NV21): `height` is
the image height, `step` is the luma row length (the chroma rows use the same), so the data is
step × H × 3/2 bytes. `nv12` is the V4L2/Jetson name for the U,V order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import OpenclawError


@dataclass(frozen=True)
class Encoding:
    """How one encoding's bytes are laid out and how they become RGB (see the table above)."""

    bytes_per_pixel: int  # of the (first) plane
    layout: str  # RGB BGR RGBA BGRA GRAY GRAY16 UYVY YUYV NV12 NV21 BAYER_RGGB BAYER_BGGR BAYER_GBRG BAYER_GRBG
    even_width: bool = False
    even_height: bool = False
    planar420: bool = False  # a luma plane of H rows followed by H/2 chroma rows of the same step

    def buffer_rows(self, height: int) -> int:
        return height * 3 // 2 if self.planar420 else height


#: every supported encoding name → its layout
ENCODINGS: dict[str, Encoding] = {
    "rgb8": Encoding(3, "RGB"),
    "bgr8": Encoding(3, "BGR"),
    "rgba8": Encoding(4, "RGBA"),
    "bgra8": Encoding(4, "BGRA"),
    "mono8": Encoding(1, "GRAY"),
    "8UC1": Encoding(1, "GRAY"),
    "8UC3": Encoding(3, "BGR"),
    "mono16": Encoding(2, "GRAY16"),
    "16UC1": Encoding(2, "GRAY16"),
    "yuv422": Encoding(2, "UYVY", even_width=True),
    "uyvy": Encoding(2, "UYVY", even_width=True),
    "yuv422_yuy2": Encoding(2, "YUYV", even_width=True),
    "yuyv": Encoding(2, "YUYV", even_width=True),
    "nv12": Encoding(1, "NV12", even_width=True, even_height=True, planar420=True),
    "nv21": Encoding(1, "NV21", even_width=True, even_height=True, planar420=True),
    "bayer_rggb8": Encoding(1, "BAYER_RGGB"),
    "bayer_bggr8": Encoding(1, "BAYER_BGGR"),
    "bayer_gbrg8": Encoding(1, "BAYER_GBRG"),
    "bayer_grbg8": Encoding(1, "BAYER_GRBG"),
}

#: OpenCV cvtColor code per layout that needs one (packed RGB-like layouts are picked by channel index)
CV_TO_RGB: dict[str, str] = {
    "UYVY": "COLOR_YUV2RGB_UYVY",
    "YUYV": "COLOR_YUV2RGB_YUY2",
    "NV12": "COLOR_YUV2RGB_NV12",
    "NV21": "COLOR_YUV2RGB_NV21",
    # ROS first-row names → OpenCV second-row names, as cv_bridge (humble) maps them
    "BAYER_RGGB": "COLOR_BayerBG2RGB",
    "BAYER_BGGR": "COLOR_BayerRG2RGB",
    "BAYER_GBRG": "COLOR_BayerGR2RGB",
    "BAYER_GRBG": "COLOR_BayerGB2RGB",
}

#: Index of R, G, B in each layout whose pixels are used as they are.
RGB_INDEX: dict[str, tuple[int, int, int]] = {
    "RGB": (0, 1, 2),
    "BGR": (2, 1, 0),
    "RGBA": (0, 1, 2),
    "BGRA": (2, 1, 0),
    "GRAY": (0, 0, 0),
}


class FrameError(OpenclawError, ValueError):
    """An image whose bytes do not describe a frame we can use."""


def encoding_of(name: str) -> Encoding:
    try:
        return ENCODINGS[name]
    except KeyError:
        raise FrameError(f"unsupported encoding {name!r}; supported: {', '.join(ENCODINGS)}") from None


def layout_of(encoding: str) -> str:
    return encoding_of(encoding).layout


def pixel_view(
    data: bytes | bytearray | memoryview | np.ndarray, height: int, width: int, step: int, encoding: str
) -> np.ndarray:
    """A zero-copy (rows, W, bytes/px) uint8 view of the image bytes, row padding removed.

    rows = H, or H × 3/2 for nv12/nv21 (luma rows, then chroma rows).
    """
    enc = encoding_of(encoding)
    if height <= 0 or width <= 0:
        raise FrameError(f"empty image {width}x{height}")
    if enc.even_width and width % 2:
        raise FrameError(f"{encoding} needs an even width, got {width}")
    if enc.even_height and height % 2:
        raise FrameError(f"{encoding} needs an even height, got {height}")
    bpp = enc.bytes_per_pixel
    row = width * bpp
    if step < row:
        raise FrameError(f"step {step} < width*{bpp} = {row} for {encoding}")
    array = isinstance(data, np.ndarray)
    buf = data.reshape(-1).view(np.uint8) if array else memoryview(data)
    size = buf.size if array else buf.nbytes
    rows = enc.buffer_rows(height)
    need = step * rows  # sensor_msgs/Image: "size is (step * rows)"; exact integers, no 32-bit wrap
    if size != need:
        what = f"{width}x{height} {encoding} with step {step}" + (" (plus H/2 chroma rows)" if enc.planar420 else "")
        raise FrameError(f"{size} data bytes, {what} needs {need} (step * rows)")
    # rows of `step` bytes, each cut to the bytes its pixels use, split into pixels: a view either way. A message's
    # bytes (what the nodes receive: every frame is viewed, most only to be dropped) in one call, 0.7 us a 1080p frame
    # here, against 2.6 for reshape, slice and reshape (kept for an array, whose own strides numpy follows) and 7.5
    # for as_strided
    if array:
        view = buf.reshape(rows, step)[:, :row].reshape(rows, width, bpp)
    else:
        view = np.ndarray((rows, width, bpp), np.uint8, buf, 0, (step, bpp, 1))
    view.flags.writeable = False
    return view


def gray16_to_gray8(pixels: np.ndarray, big_endian: bool) -> np.ndarray:
    """(H, W, 2) bytes of 16-bit samples → (H, W) uint8, value8 = round(v / 257).

    OpenCV's convertScaleAbs with alpha 1/257 rounds to nearest; v / 257 is never exactly
    halfway between two integers, so this equals round(v / 257) for every v (tested on all 65536).
    """
    import cv2

    h, w = pixels.shape[:2]
    dtype = ">u2" if big_endian else "<u2"
    v = np.ascontiguousarray(pixels).view(dtype).reshape(h, w)
    return cv2.convertScaleAbs(v.astype(np.uint16, copy=False), alpha=1.0 / 257.0)


def to_rgb(pixels: np.ndarray, encoding: str, big_endian: bool = False) -> np.ndarray:
    """Convert a validated pixel view to contiguous (H, W, 3) RGB uint8, as the table above says."""
    import cv2

    layout = layout_of(encoding)
    if layout == "GRAY16":
        return cv2.cvtColor(gray16_to_gray8(pixels, big_endian), cv2.COLOR_GRAY2RGB)
    if layout in RGB_INDEX:
        idx = RGB_INDEX[layout]
        if idx == (0, 1, 2) and pixels.shape[2] == 3:
            return np.ascontiguousarray(pixels)
        return np.ascontiguousarray(pixels[:, :, list(idx)])
    src = np.ascontiguousarray(pixels)
    if src.shape[2] == 1:
        src = src[:, :, 0]
    return cv2.cvtColor(src, getattr(cv2, CV_TO_RGB[layout]))
