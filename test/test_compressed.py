"""sensor_msgs/CompressedImage: image_transport's format strings, JPEG/PNG decoding against Pillow, corrupt data.

Format strings are the ones compressed_image_transport (image_transport_plugins, humble) writes:
compressed_publisher.cpp builds `<encoding>; jpeg compressed bgr8|mono8` and
`<encoding>; png compressed bgr8|bgr16|` (grey PNGs keep their encoding: the target is empty);
compressed_depth_image_transport writes `<encoding>; compressedDepth`.
"""

from __future__ import annotations

import io
import struct
from collections import Counter

import compressed_fuzz
import cv2
import numpy as np
import pytest
from compressed_fuzz import AT_ARRIVAL, BY_DECODING, GOOD, MALFORMED_FORMATS
from PIL import Image

from openclaw_vision.preprocess import compressed as cmp
from openclaw_vision.preprocess.compressed import (
    MAX_PIXELS,
    CompressedFormat,
    CompressedFrame,
    decode_compressed,
    parse_format,
)
from openclaw_vision.preprocess.cpu import CpuPreprocessor
from openclaw_vision.preprocess.encodings import FrameError


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    import skimage.data

    return np.ascontiguousarray(skimage.data.astronaut()[:240, :320])


def pil_rgb(data: bytes) -> np.ndarray:
    """An independent decoder: Pillow."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def encode(img: np.ndarray, ext: str, *params) -> bytes:
    ok, buf = cv2.imencode(ext, img, list(params))
    assert ok
    return buf.tobytes()


@pytest.mark.parametrize(
    ("fmt", "parsed"),
    [
        ("rgb8; jpeg compressed bgr8", CompressedFormat("jpeg", "rgb8", "bgr8")),
        ("bgr8; jpeg compressed bgr8", CompressedFormat("jpeg", "bgr8", "bgr8")),
        ("mono8; jpeg compressed mono8", CompressedFormat("jpeg", "mono8", "mono8")),
        ("bgr8; png compressed bgr8", CompressedFormat("png", "bgr8", "bgr8")),
        ("mono8; png compressed ", CompressedFormat("png", "mono8", "")),
        ("mono16; png compressed ", CompressedFormat("png", "mono16", "")),
        ("rgb16; png compressed bgr16", CompressedFormat("png", "rgb16", "bgr16")),
        ("rgb8; jpeg compressed rgb8", CompressedFormat("jpeg", "rgb8", "rgb8")),
        ("rgba8; jpeg compressed bgr8", CompressedFormat("jpeg", "rgba8", "bgr8")),
        ("rgb16; jpeg compressed bgr8", CompressedFormat("jpeg", "rgb16", "bgr8")),
        ("bayer_rggb8; jpeg compressed mono8", CompressedFormat("jpeg", "bayer_rggb8", "mono8")),
        ("8UC1; jpeg compressed mono8", CompressedFormat("jpeg", "8UC1", "mono8")),
        ("16UC1; png compressed ", CompressedFormat("png", "16UC1", "")),
        ("bgra16; png compressed bgr16", CompressedFormat("png", "bgra16", "bgr16")),
        ("rgb16; png compressed rgb16", CompressedFormat("png", "rgb16", "rgb16")),
        ("mono16; png compressed", CompressedFormat("png", "mono16", "")),  # the trailing space lost on the way
        ("jpeg", CompressedFormat("jpeg")),
        ("png", CompressedFormat("png")),
        ("jpg", CompressedFormat("jpeg")),
    ],
)
def test_image_transport_format_strings(fmt, parsed):
    assert parse_format(fmt) == parsed


@pytest.mark.parametrize(
    ("fmt", "reason"),
    [
        ("16UC1; compressedDepth", "compressed_depth_image_transport"),
        ("32FC1; compressedDepth png", "depth map"),
        ("tiff", "codec 'tiff' not supported"),
        ("rgb8; tiff compressed bgr8", "codec 'tiff' not supported"),
        ("h264", "codec 'h264' not supported"),
        ("", "empty CompressedImage format"),
        ("rgb8; jpeg", "expected '<encoding>; <jpeg|png> compressed"),
        ("rgb8; jpeg compressed brg8", "pixel format 'brg8' is not one image_transport writes"),
    ],
)
def test_formats_we_do_not_decode_are_refused_with_the_reason(fmt, reason):
    with pytest.raises(FrameError, match=reason):
        parse_format(fmt)


@pytest.mark.parametrize("fmt", MALFORMED_FORMATS)
def test_malformed_format_strings_are_refused_not_guessed_at(fmt):
    """A near miss of image_transport's grammar (a typo, a NUL, a second codec) could mean other colours."""
    with pytest.raises(FrameError, match="CompressedImage format"):
        parse_format(fmt)


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8"])
@pytest.mark.parametrize("codec", ["jpeg", "png"])
def test_colour_jpeg_and_png_decode_as_pillow_does(photo, encoding, codec):
    from openclaw_vision.preprocess.sample_frames import compress_rgb

    fmt, data = compress_rgb(photo, encoding, codec)
    assert fmt == f"{encoding}; {codec} compressed bgr8"  # what compressed_image_transport writes
    frame = decode_compressed(data, fmt, stamp_ns=7, frame_id="cam")
    assert frame.encoding == "bgr8" and (frame.stamp_ns, frame.frame_id) == (7, "cam")
    ours, ref = frame.to_rgb().astype(int), pil_rgb(data).astype(int)
    if codec == "png":
        assert np.array_equal(ours, photo) and np.array_equal(ref, photo)
    else:  # two JPEG decoders may differ by a level (IDCT rounding)
        assert np.abs(ours - ref).max() <= 2 and np.abs(ours - ref).mean() < 0.5


def test_older_publishers_rgb_order_is_read_as_rgb(photo):
    """'compressed rgb8' (not bgr): the decoded channels are R,G,B; the subscriber swaps them, so do we."""
    data = encode(photo, ".png")  # the RGB array handed to the encoder as it is
    frame = decode_compressed(data, "rgb8; png compressed rgb8")
    assert frame.encoding == "rgb8" and np.array_equal(frame.to_rgb(), photo)


@pytest.mark.parametrize("fmt", ["mono8; jpeg compressed mono8", "mono8; png compressed ", "jpeg", "png"])
def test_grey_images(photo, fmt):
    grey = cv2.cvtColor(photo, cv2.COLOR_RGB2GRAY)
    data = encode(grey, ".jpg" if "jpeg" in fmt else ".png")
    frame = decode_compressed(data, fmt)
    assert frame.encoding == "mono8"
    ref = np.asarray(Image.open(io.BytesIO(data)).convert("L")).astype(int)
    assert np.abs(frame.to_rgb()[..., 1].astype(int) - ref).max() <= 2


def test_bare_format_with_three_channels_is_bgr8(photo):
    data = encode(cv2.cvtColor(photo, cv2.COLOR_RGB2BGR), ".png")
    frame = decode_compressed(data, "png")
    assert frame.encoding == "bgr8" and np.array_equal(frame.to_rgb(), photo)


def test_sixteen_bit_png_becomes_mono16_then_round_v_over_257(photo):
    v = np.array([[0, 128, 129, 30000, 65535, 65408]], np.uint16)
    data = encode(v, ".png")
    frame = decode_compressed(data, "mono16; png compressed ")
    assert frame.encoding == "mono16"
    assert frame.to_rgb()[0, :, 0].tolist() == [round(int(x) / 257) for x in v[0]]


def test_a_decoded_frame_preprocesses_like_the_raw_one(photo):
    from openclaw_vision.preprocess.frame import Frame
    from openclaw_vision.preprocess.sample_frames import compress_rgb

    fmt, data = compress_rgb(photo, "rgb8", "png")
    pre = CpuPreprocessor()
    np.testing.assert_array_equal(pre(decode_compressed(data, fmt)), pre(Frame.from_rgb(photo)))


def test_trailing_zero_padding_after_eoi_is_accepted(photo):
    data = encode(photo, ".jpg") + b"\0" * 4000  # UVC cameras pad MJPEG buffers like this
    assert decode_compressed(data, "jpeg").width == 320


@pytest.mark.parametrize(
    ("damage", "fmt", "message"),
    [
        (lambda j, p: j[: len(j) // 2], "jpeg", "without an EOI marker"),
        (lambda j, p: j[:-2] + b"\0\0", "jpeg", "without an EOI marker"),
        (lambda j, p: b"\0" * 64, "jpeg", "do not start with a JPEG SOI"),
        (lambda j, p: p, "rgb8; jpeg compressed bgr8", "do not start with a JPEG SOI"),
        (lambda j, p: j, "bgr8; png compressed bgr8", "do not start with the PNG signature"),
        (lambda j, p: p[: len(p) // 2], "png", "do not end with an IEND chunk"),
        (lambda j, p: p[:100] + bytes(b ^ 0x5A for b in p[100:160]) + p[160:], "png", "corrupt png"),
        (lambda j, p: j[:3] + b"\xff\xd9", "jpeg", "corrupt jpeg"),
        (lambda j, p: b"", "jpeg", "empty jpeg data"),
    ],
)
def test_corrupt_data_is_a_frame_error(photo, damage, fmt, message):
    jpeg, png = encode(photo, ".jpg"), encode(photo, ".png")
    with pytest.raises(FrameError, match=message):
        decode_compressed(damage(jpeg, png), fmt)


def test_the_decoder_seam_takes_another_decoder(photo, monkeypatch):
    """An nvJPEG decoder registers under a name and is used for the same checks and Frame rules."""
    calls = []

    class Recording:
        name = "recording"

        def decode(self, data, codec):
            calls.append((codec, data.size))
            return cv2.imdecode(data, cv2.IMREAD_UNCHANGED)

    monkeypatch.setitem(cmp.DECODERS, "recording", Recording)
    data = encode(cv2.cvtColor(photo, cv2.COLOR_RGB2BGR), ".jpg")
    frame = decode_compressed(data, "rgb8; jpeg compressed bgr8", cmp.create_decoder("recording"))
    assert calls == [("jpeg", len(data))] and frame.encoding == "bgr8"
    with pytest.raises(ValueError, match="image decoder must be one of"):
        cmp.create_decoder("nvjpeg-missing")


def test_image_transport_parameter_picks_the_compressed_sub_topic():
    from openclaw_vision.ros.intake import image_subscription
    from openclaw_vision.runtime.config import ConfigError, EncoderConfig

    assert image_subscription(EncoderConfig()) == ("/camera/image_raw", "sensor_msgs/msg/Image")
    cfg = EncoderConfig(image_topic="/front/image_raw/", image_transport="compressed").validate()
    assert image_subscription(cfg) == ("/front/image_raw/compressed", "sensor_msgs/msg/CompressedImage")
    with pytest.raises(ConfigError, match="parameter image_transport='theora': choose one of raw, compressed"):
        EncoderConfig(image_transport="theora").validate()


def _png_claiming(width: int, height: int) -> bytes:
    """A small PNG whose IHDR (CRC made right) claims width × height: nothing reads past the header."""
    chunks = compressed_fuzz.png_chunks(encode(np.zeros((4, 4, 3), np.uint8), ".png"))
    return compressed_fuzz.png_build([(b"IHDR", compressed_fuzz.ihdr(width, height)), *chunks[1:]])


def test_the_size_limit_takes_an_8k_camera_and_refuses_more_before_decoding():
    assert 7680 * 4320 <= MAX_PIXELS < 8192 * 8192
    CompressedFrame.from_buffer(_png_claiming(7680, 4320), "png")  # 8K UHD: through to the decoder
    with pytest.raises(FrameError, match=r"png of 8192×4097 pixels: more than the node's limit of 33554432"):
        CompressedFrame.from_buffer(_png_claiming(8192, 4097), "png")


def test_a_jpeg_claiming_more_blocks_than_its_data_has_bits_is_refused_at_arrival(photo):
    """libjpeg would decode it, filling the missing image with grey, at the claimed size."""
    data = encode(photo[:16, :16], ".jpg")
    assert CompressedFrame.from_buffer(data, "jpeg").decode().width == 16
    segs, rest = compressed_fuzz.jpeg_segments(data)
    i = next(i for i, (m, _) in enumerate(segs) if m == 0xC0)
    p = segs[i][1]
    segs[i] = (0xC0, p[:1] + struct.pack(">HH", 4000, 4000) + p[5:])
    with pytest.raises(FrameError, match=r"bytes of scan data cannot hold 4000×4000 pixels"):
        CompressedFrame.from_buffer(compressed_fuzz.jpeg_build(segs, rest), "jpeg")


def test_fuzzed_compressed_images_each_meet_their_verdict():
    """compressed_fuzz's cases, in process: a good one decodes; a bad one is refused on arrival when
    its defect shows without decoding, else it passes arrival and its decode is refused."""
    cases = [*compressed_fuzz.generate(3000, seed=7), *compressed_fuzz.by_decoding(per_kind=8, seed=8)]
    wrong = []
    for case in cases:
        try:
            frame = CompressedFrame.from_buffer(case.data, case.format)
        except FrameError as err:
            if case.verdict != AT_ARRIVAL:
                wrong.append((case.kind, case.format, f"refused at arrival: {err}"))
            continue
        if case.verdict == AT_ARRIVAL:
            wrong.append((case.kind, case.format, "passed arrival"))
            continue
        try:
            decoded = frame.decode()
        except FrameError as err:
            if case.verdict == GOOD:
                wrong.append((case.kind, case.format, f"refused by decoding: {err}"))
            continue
        if case.verdict == BY_DECODING:
            wrong.append((case.kind, case.format, f"decoded to {decoded.encoding} {decoded.width}×{decoded.height}"))
    assert not wrong, wrong[:10]
    kinds, verdicts = Counter(c.kind for c in cases), Counter(c.verdict for c in cases)
    assert set(kinds) == set(compressed_fuzz.KINDS) and min(verdicts[v] for v in (GOOD, AT_ARRIVAL, BY_DECODING)) > 200
