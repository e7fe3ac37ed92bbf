"""sensor_msgs/CompressedImage (JPEG, PNG) → Frame, behind a small decoder seam.

What `format` means is what image_transport_plugins' compressed_image_transport (humble)
writes and reads (compressed_publisher.cpp, compressed_subscriber.cpp):

- `"<encoding>; jpeg compressed <target>"` / `"<encoding>; png compressed <target>"`: the
  image was `<encoding>` before compression; colour images (isColor: rgb8/bgr8/rgba8/bgra8/…16)
  were compressed as `<target>` = bgr8 (JPEG) or bgr8/bgr16 (PNG), grey ones as mono8 (JPEG) or
  unchanged (PNG, empty target: the string ends in "compressed "). The subscriber decodes with
  cv::imdecode(IMREAD_UNCHANGED) and, for a colour encoding, reads the decoded channels as BGR
  when the part after ';' contains "compressed bgr", else as RGB (older publishers).
- `"jpeg"`, `"png"` (no ';', older publishers): 1 channel is mono8, 3 channels bgr8.
- `"<encoding>; compressedDepth …"` (compressed_depth_image_transport: a 12-byte header, then PNG
  or RVL of a depth map) and `tiff` are refused with the reason: depth maps are not camera
  images for the encoder, and TIFF is not a camera transport.

The decoded pixels become a Frame without conversion: (H, W, 3) as bgr8 or rgb8 by the rule
above, (H, W, 4) as bgra8/rgba8, (H, W) as mono8; 16-bit decodes (PNG of mono16/rgb16) become
mono16 (native byte order) or, for colour, 8 bits by round(v / 257) (encodings.py's rule).

Corrupt data is a FrameError (the node counts it as rejected). What is visible without
decoding a pixel is refused when the message arrives (`CompressedFrame.from_buffer`): a format
string that is not one of the above, data that does not start with the codec's signature, a
JPEG whose last marker (after any zero padding) is not EOI or a PNG whose last chunk is not
IEND (a truncated frame: libjpeg would decode it with a grey bottom), a JPEG or PNG header that
is broken or claims more than `MAX_PIXELS`, and a JPEG with too little scan data for the image
it claims (compressed_headers.py). Damage inside the compressed stream is found by the decoder,
when the frame is decoded (`CompressedFrame.decode`). A JPEG damaged inside its entropy-coded
data can still decode: JPEG carries no checksum (PNG does: every chunk has a CRC, which libpng
checks).

The seam: `ImageDecoder.decode(data, codec) -> ndarray` in the image's memory order; OpenCV's
imdecode by default, an nvJPEG decoder on a GPU can take its place (`DECODERS`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .compressed_headers import check_jpeg, check_png
from .encodings import FrameError
from .frame import Frame, stamp_to_ns

CODECS = ("jpeg", "png")
#: The node's limit on a compressed image's size, width × height, checked from its header before
#: decoding: 2^25 ≈ 33.5 MP, above 8K UHD (7680×4320 = 33.2 MP). A decoder allocates what the
#: header claims, and a few hundred bytes can claim gigabytes.
MAX_PIXELS = 1 << 25
#: the pixel formats image_transport writes after "compressed " (compressed_publisher.cpp: bgr8 or
#: mono8 for JPEG; bgr8, bgr16 or none for PNG; older publishers rgb8, rgb16)
TARGETS = ("bgr8", "rgb8", "mono8", "bgr16", "rgb16", "")
#: "<encoding>; <codec> compressed[ <target>]", spaces exactly as compressed_publisher.cpp writes them
_FORMAT = re.compile(r"(?P<encoding>[A-Za-z0-9_]+); (?P<codec>[A-Za-z0-9]+) compressed(?: (?P<target>\S*))?")
_BARE_FORMAT = re.compile(r"[A-Za-z0-9]+")
#: sensor_msgs/image_encodings.hpp (humble) isColor(): colour channels that a compressed BGR/RGB decode maps to
COLOR_ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "rgb16", "bgr16", "rgba16", "bgra16")


@dataclass(frozen=True)
class CompressedFormat:
    """A parsed `CompressedImage.format`."""

    codec: str  # jpeg | png
    encoding: str = ""  # the raw encoding before compression ("" for the old bare format)
    target: str = ""  # what was compressed (bgr8, mono8, bgr16, ""), after "compressed "

    @property
    def decoded_is_bgr(self) -> bool:
        """Whether the decoded 3/4-channel pixels are in B,G,R order (else R,G,B)."""
        if not self.encoding or self.encoding not in COLOR_ENCODINGS:
            return True  # bare "jpeg"/"png", or grey: OpenCV's own order
        return self.target.startswith("bgr")


def parse_format(fmt: str) -> CompressedFormat:
    """Parse image_transport's `format` string; FrameError with the reason for what we do not decode.

    Strict: a string image_transport did not write could mean anything (a typo in the pixel
    format would swap the colours), so it is refused rather than guessed at.
    """
    text = fmt.strip(" ")
    if not text:
        raise FrameError("empty CompressedImage format (expected e.g. 'rgb8; jpeg compressed bgr8', 'jpeg' or 'png')")
    if "compresseddepth" in text.lower():
        raise FrameError(
            f"CompressedImage format {fmt!r} is compressed_depth_image_transport's (a depth map): not supported, "
            "subscribe to the camera's colour image instead"
        )
    if _BARE_FORMAT.fullmatch(text):
        return CompressedFormat(_codec_name(text, fmt))
    m = _FORMAT.fullmatch(text)
    if m is None:
        raise FrameError(
            f"CompressedImage format {fmt!r}: expected '<encoding>; <jpeg|png> compressed [<pixel format>]', "
            "'jpeg' or 'png'"
        )
    codec, target = _codec_name(m["codec"], fmt), m["target"] or ""
    if target not in TARGETS:
        raise FrameError(
            f"CompressedImage format {fmt!r}: pixel format {target!r} is not one image_transport writes "
            f"({', '.join(t for t in TARGETS if t)} or none)"
        )
    return CompressedFormat(codec, m["encoding"], target)


def _codec_name(word: str, fmt: str) -> str:
    name = word.lower()
    name = "jpeg" if name == "jpg" else name
    if name not in CODECS:
        raise FrameError(f"CompressedImage format {fmt!r}: codec {word!r} not supported (jpeg and png are)")
    return name


def check_structure(data: np.ndarray, codec: str) -> tuple[int, int]:
    """(width, height) from the compressed bytes' structure, read without decoding (FrameError if broken)."""
    return (check_jpeg if codec == "jpeg" else check_png)(data, MAX_PIXELS)


class ImageDecoder(Protocol):
    name: str

    def decode(self, data: np.ndarray, codec: str) -> np.ndarray:
        """(H, W[, C]) uint8/uint16 pixels in the stream's channel order; FrameError if undecodable."""
        ...


class OpenCvDecoder:
    """cv2.imdecode with IMREAD_UNCHANGED, as compressed_image_transport's subscriber does by default."""

    name = "opencv"

    def decode(self, data: np.ndarray, codec: str) -> np.ndarray:
        import cv2

        try:
            img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
        except cv2.error as err:
            raise FrameError(f"corrupt {codec}: OpenCV could not decode {data.size} bytes ({err})") from None
        if img is None or img.size == 0:
            raise FrameError(f"corrupt {codec}: OpenCV could not decode {data.size} bytes")
        return img


#: decoders by name; "opencv" is the default (an nvJPEG decoder registers here on a GPU)
DECODERS: dict[str, type] = {"opencv": OpenCvDecoder}


def create_decoder(name: str = "opencv") -> ImageDecoder:
    if name not in DECODERS:
        raise ValueError(f"image decoder must be one of {', '.join(DECODERS)}, got {name!r}")
    return DECODERS[name]()


def _to_8bit(img: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.convertScaleAbs(img, alpha=1.0 / 257.0)  # round(v / 257), as encodings.gray16_to_gray8


def decoded_frame(img: np.ndarray, fmt: CompressedFormat, stamp_ns: int = 0, frame_id: str = "") -> Frame:
    """Wrap decoded pixels as a Frame in their own order (no colour conversion)."""
    if img.dtype == np.uint16:
        if img.ndim == 2:
            big = sys.byteorder == "big"  # imdecode's uint16 samples are in this machine's order
            return Frame(img.view(np.uint8).reshape(*img.shape, 2), "mono16", stamp_ns, frame_id, big_endian=big)
        img = _to_8bit(img)
    if img.dtype != np.uint8:
        raise FrameError(f"decoded {fmt.codec} has sample type {img.dtype}, expected 8 or 16 bits")
    if img.ndim == 2:
        return Frame(img[:, :, None], "mono8", stamp_ns, frame_id)
    channels = img.shape[2]
    if channels == 1:
        return Frame(img, "mono8", stamp_ns, frame_id)
    if channels not in (3, 4):
        raise FrameError(f"decoded {fmt.codec} has {channels} channels; 1, 3 or 4 are supported")
    order = "bgr" if fmt.decoded_is_bgr else "rgb"
    return Frame(img, f"{order}{'a' if channels == 4 else ''}8", stamp_ns, frame_id)


@dataclass
class CompressedFrame:
    """Compressed bytes that passed the checks on arrival (format, structure, size); decoded on demand.

    A node decodes only the frames it encodes: one displaced by a newer frame (newest-frame
    policy) is dropped without paying for its decode.
    """

    data: np.ndarray
    format: CompressedFormat
    stamp_ns: int = 0
    frame_id: str = ""

    @classmethod
    def from_buffer(cls, data, fmt: str | CompressedFormat, stamp_ns: int = 0, frame_id: str = "") -> CompressedFrame:
        parsed = parse_format(fmt) if isinstance(fmt, str) else fmt
        buf = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
        buf = np.ascontiguousarray(buf)  # the header checks read it as one buffer (struct, memoryview)
        if buf.size == 0:
            raise FrameError(f"empty {parsed.codec} data")
        check_structure(buf, parsed.codec)
        return cls(buf, parsed, stamp_ns, frame_id)

    @classmethod
    def from_message(cls, msg: Any) -> CompressedFrame:
        """Check anything shaped like sensor_msgs/CompressedImage (format and structure; raises
        FrameError) and keep its bytes for a later decode."""
        return cls.from_buffer(
            msg.data, str(msg.format), stamp_ns=stamp_to_ns(msg.header.stamp), frame_id=str(msg.header.frame_id)
        )

    def decode(self, decoder: ImageDecoder | None = None) -> Frame:
        img = (decoder or create_decoder()).decode(self.data, self.format.codec)
        return decoded_frame(img, self.format, self.stamp_ns, self.frame_id)


def decode_compressed(
    data, fmt: str | CompressedFormat, decoder: ImageDecoder | None = None, stamp_ns: int = 0, frame_id: str = ""
) -> Frame:
    """CompressedImage bytes + format → Frame (raises FrameError on anything we cannot use)."""
    return CompressedFrame.from_buffer(data, fmt, stamp_ns, frame_id).decode(decoder)
