// One fused CUDA kernel for the encoder's preprocessing: raw sensor_msgs/Image bytes (any encoding
// the CPU path reads, any size, any row pitch) -> crop -> antialiased downscale -> RGB -> mean/std
// -> NCHW fp16 or fp32, written straight into the encoder's input buffer. One launch per frame.
//
// Why this shape (the arithmetic is openclaw_vision/preprocess/gpu.py's `resample_plan`):
// the CPU path (preprocess/cpu.py) halves the crop with 2x2 boxes, finishes with an area resize
// and sharpens with an unsharp mask. Every one of those steps is linear, and the chain is a sum
// of two separable terms (the resize, and minus the blurred resize), so it is two pairs of weight
// tables: output pixel (i, j) = sum over terms t and window offsets r, c of
// yw[i][t][r] * xw[j][t][c] * rgb(crop_y0 + ys[i] + r, crop_x0 + xs[j] + c), clamped and rounded
// to a uint8 level as the CPU path's last cast does. No intermediate image is written, so
// the kernel needs no shared memory, no __syncthreads and no second launch. Each thread owns one
// output column and ROWS_PER_THREAD consecutive output rows: a source row's horizontal sum is
// computed once and reused by every output row whose vertical support covers it.
//
// The same source compiles with g++ through shim.h (tests run it on the CPU under ASan/UBSan), so
// the code keeps to plain C++: no CUDA headers, float-only arithmetic (no .f64 in the PTX), and
// the one intrinsic it needs (float -> half) is guarded.

#ifndef ROWS_PER_THREAD
#define ROWS_PER_THREAD 4
#endif

#ifdef OPENCLAW_SHIM
#define OPENCLAW_RESTRICT
#else
#define OPENCLAW_RESTRICT __restrict__
#endif

typedef unsigned short half_bits;  // IEEE binary16 bits: no cuda_fp16.h needed, here or under the shim

// Encodings: the numbers gpu.py's ENCODING_CODES passes. Packed 8-bit layouts first.
#define ENC_RGB8 0
#define ENC_BGR8 1
#define ENC_RGBA8 2
#define ENC_BGRA8 3
#define ENC_GRAY8 4
#define ENC_UYVY 5
#define ENC_YUYV 6
#define ENC_BAYER_RGGB 7
#define ENC_BAYER_BGGR 8
#define ENC_BAYER_GBRG 9
#define ENC_BAYER_GRBG 10
#define ENC_NV12 11
#define ENC_NV21 12
#define ENC_GRAY16 13

typedef unsigned char u8;

struct Image {
  const u8* data;     // first byte of row 0
  long long step;     // bytes per row (>= width * bytes per pixel)
  int height, width;  // the full frame, in pixels
  int big_endian;     // mono16 byte order (sensor_msgs/Image.is_bigendian)
};

struct Rgb {
  float r, g, b;
};

__device__ __forceinline__ int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

__device__ __forceinline__ const u8* row_of(const Image& im, int y) { return im.data + (long long)y * im.step; }

// BT.601 limited range in OpenCV's fixed point (imgproc's ITUR_BT_601_* constants, 20 bits):
// bit-exact with cv2.cvtColor COLOR_YUV2RGB_{UYVY,YUY2,NV12,NV21}.
__device__ __forceinline__ float yuv_channel(int y_term, int chroma) {
  int v = (y_term + (1 << 19) + chroma) >> 20;
  return (float)clamp_int(v, 0, 255);
}

__device__ __forceinline__ Rgb yuv_to_rgb(int y, int u, int v) {
  int yy = (y > 16 ? y - 16 : 0) * 1220542;
  u -= 128;
  v -= 128;
  Rgb p;
  p.r = yuv_channel(yy, 1673527 * v);
  p.g = yuv_channel(yy, -852492 * v - 409993 * u);
  p.b = yuv_channel(yy, 2116026 * u);
  return p;
}

// Colour at (y & 1, x & 1) of each Bayer pattern, ROS's name = the first row (0 R, 1 G, 2 B),
// packed two bits per cell: cell index (y & 1) * 2 + (x & 1).
__device__ __forceinline__ int bayer_layout(int enc) {
  switch (enc) {
    case ENC_BAYER_RGGB: return 0 | (1 << 2) | (1 << 4) | (2 << 6);
    case ENC_BAYER_BGGR: return 2 | (1 << 2) | (1 << 4) | (0 << 6);
    case ENC_BAYER_GBRG: return 1 | (2 << 2) | (0 << 4) | (1 << 6);
    default:             return 1 | (0 << 2) | (2 << 4) | (1 << 6);  // GRBG
  }
}

__device__ __forceinline__ int bayer_colour(int layout, int y, int x) { return (layout >> (2 * (((y & 1) << 1) | (x & 1)))) & 3; }

// OpenCV's bilinear demosaic (COLOR_Bayer*2RGB): interior pixels from their 3x3 neighbourhood with
// integer rounding; the outermost rows and columns repeat their inner neighbour's result.
__device__ __forceinline__ Rgb bayer_rgb(const Image& im, int layout, int y, int x) {
  if (im.height >= 3) y = clamp_int(y, 1, im.height - 2);
  if (im.width >= 3) x = clamp_int(x, 1, im.width - 2);
  int yn = clamp_int(y - 1, 0, im.height - 1), ys = clamp_int(y + 1, 0, im.height - 1);
  int xw = clamp_int(x - 1, 0, im.width - 1), xe = clamp_int(x + 1, 0, im.width - 1);
  const u8* rn = row_of(im, yn);
  const u8* rc = row_of(im, y);
  const u8* rs = row_of(im, ys);
  int own = bayer_colour(layout, y, x);
  int c[3];
  c[own] = rc[x];
  if (own == 1) {
    int across = bayer_colour(layout, y, x + 1);  // the colour left and right of this green
    c[across] = (rc[xw] + rc[xe] + 1) >> 1;
    c[2 - across] = (rn[x] + rs[x] + 1) >> 1;
  } else {
    c[1] = (rn[x] + rs[x] + rc[xw] + rc[xe] + 2) >> 2;
    c[2 - own] = (rn[xw] + rn[xe] + rs[xw] + rs[xe] + 2) >> 2;
  }
  Rgb p;
  p.r = (float)c[0];
  p.g = (float)c[1];
  p.b = (float)c[2];
  return p;
}

// The RGB value (0..255) of frame pixel (y, x); y and x are inside the frame.
template <int ENC>
__device__ __forceinline__ Rgb pixel(const Image& im, int y, int x) {
  const u8* row = row_of(im, y);
  Rgb p;
  if (ENC == ENC_RGB8 || ENC == ENC_BGR8 || ENC == ENC_RGBA8 || ENC == ENC_BGRA8) {
    const int bpp = (ENC == ENC_RGB8 || ENC == ENC_BGR8) ? 3 : 4;
    const u8* q = row + x * bpp;
    const bool bgr = ENC == ENC_BGR8 || ENC == ENC_BGRA8;
    p.r = (float)q[bgr ? 2 : 0];
    p.g = (float)q[1];
    p.b = (float)q[bgr ? 0 : 2];
  } else if (ENC == ENC_GRAY8) {
    p.r = p.g = p.b = (float)row[x];
  } else if (ENC == ENC_GRAY16) {
    const u8* q = row + 2 * x;
    int v = im.big_endian ? (q[0] << 8) | q[1] : q[0] | (q[1] << 8);
    p.r = p.g = p.b = (float)((v + 128) / 257);  // round(v / 257): 65535 -> 255
  } else if (ENC == ENC_UYVY || ENC == ENC_YUYV) {
    const u8* q = row + 2 * (x & ~1);  // one chroma pair per two pixels
    if (ENC == ENC_UYVY) {
      p = yuv_to_rgb(q[(x & 1) ? 3 : 1], q[0], q[2]);
    } else {
      p = yuv_to_rgb(q[(x & 1) ? 2 : 0], q[1], q[3]);
    }
  } else if (ENC == ENC_NV12 || ENC == ENC_NV21) {
    // Y plane (height rows), then interleaved chroma at half resolution, same row pitch.
    const u8* c = row_of(im, im.height + (y >> 1)) + (x & ~1);
    int u = ENC == ENC_NV12 ? c[0] : c[1];
    int v = ENC == ENC_NV12 ? c[1] : c[0];
    p = yuv_to_rgb(row[x], u, v);
  } else {
    p = bayer_rgb(im, bayer_layout(ENC), y, x);
  }
  return p;
}

__device__ __forceinline__ float level(float v) {
  // the CPU path's final uint8 cast: saturate, round half to even
  return rintf(fminf(fmaxf(v, 0.0f), 255.0f));
}

__device__ __forceinline__ half_bits to_half(float v) {
#ifdef OPENCLAW_SHIM
  return shim_float_to_half_bits(v);
#else
  half_bits h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
#endif
}

// The encoder's input is fp16 (TensorRT, torch) or fp32 (ONNX Runtime); one flag, read once per pixel.
struct Output {
  void* data;  // (3, size, size) of float or binary16
  int half;
};

__device__ __forceinline__ void store(const Output& out, long long i, float v) {
  if (out.half) {
    ((half_bits*)out.data)[i] = to_half(v);
  } else {
    ((float*)out.data)[i] = v;
  }
}

// A resampling matrix pair per axis, as windows: output i reads source rows (or columns)
// start[i] .. start[i] + count - 1 with weights[(i * 2 + term) * count + offset].
struct Taps {
  const int* start;
  const float* weights;
  int count;
};

template <int ENC>
__device__ void resample(const Image& im, int crop_x0, int crop_y0, const Taps& ty, const Taps& tx,
                         const float* OPENCLAW_RESTRICT affine, int size, const Output& out) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row0 = (blockIdx.y * blockDim.y + threadIdx.y) * ROWS_PER_THREAD;
  if (col >= size || row0 >= size) return;
  const int rows = size - row0 < ROWS_PER_THREAD ? size - row0 : ROWS_PER_THREAD;

  int first[ROWS_PER_THREAD];
  float acc[ROWS_PER_THREAD][3];
#pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    first[k] = ty.start[k < rows ? row0 + k : row0];
    acc[k][0] = acc[k][1] = acc[k][2] = 0.0f;
  }
  const int y_begin = first[0];
  const int y_end = ty.start[row0 + rows - 1] + ty.count;  // exclusive
  const int x_begin = crop_x0 + tx.start[col];
  const float* xa = tx.weights + (long long)col * 2 * tx.count;  // term 0: the resize
  const float* xb = xa + tx.count;                                // term 1: the blurred resize

  for (int sy = y_begin; sy < y_end; ++sy) {
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, b0 = 0.0f, b1 = 0.0f, b2 = 0.0f;
    for (int t = 0; t < tx.count; ++t) {
      const Rgb p = pixel<ENC>(im, crop_y0 + sy, x_begin + t);
      const float wa = xa[t], wb = xb[t];
      a0 += wa * p.r;
      a1 += wa * p.g;
      a2 += wa * p.b;
      b0 += wb * p.r;
      b1 += wb * p.g;
      b2 += wb * p.b;
    }
#pragma unroll
    for (int k = 0; k < ROWS_PER_THREAD; ++k) {
      const int off = sy - first[k];
      if (k < rows && off >= 0 && off < ty.count) {
        const float* wy = ty.weights + (long long)(row0 + k) * 2 * ty.count + off;
        const float wa = wy[0], wb = wy[ty.count];
        acc[k][0] += wa * a0 + wb * b0;
        acc[k][1] += wa * a1 + wb * b1;
        acc[k][2] += wa * a2 + wb * b2;
      }
    }
  }

  const long long plane = (long long)size * size;
#pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    if (k < rows) {
      const long long i = (long long)(row0 + k) * size + col;
#pragma unroll
      for (int c = 0; c < 3; ++c) store(out, c * plane + i, level(acc[k][c]) * affine[c] + affine[3 + c]);
    }
  }
}

__device__ void dispatch(int enc, const Image& im, int crop_x0, int crop_y0, const Taps& ty, const Taps& tx,
                         const float* affine, int size, const Output& out) {
  switch (enc) {
    case ENC_RGB8: resample<ENC_RGB8>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_BGR8: resample<ENC_BGR8>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_RGBA8: resample<ENC_RGBA8>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_BGRA8: resample<ENC_BGRA8>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_GRAY8: resample<ENC_GRAY8>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_UYVY: resample<ENC_UYVY>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_YUYV: resample<ENC_YUYV>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_BAYER_RGGB: resample<ENC_BAYER_RGGB>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_BAYER_BGGR: resample<ENC_BAYER_BGGR>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_BAYER_GBRG: resample<ENC_BAYER_GBRG>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_BAYER_GRBG: resample<ENC_BAYER_GRBG>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_NV12: resample<ENC_NV12>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_NV21: resample<ENC_NV21>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    case ENC_GRAY16: resample<ENC_GRAY16>(im, crop_x0, crop_y0, ty, tx, affine, size, out); break;
    default: break;  // gpu.py only passes codes from its table
  }
}

// Kernel arguments, in gpu.py's `KernelJob.arguments()` order. Grid: x over output columns, y over
// groups of ROWS_PER_THREAD output rows. `affine` is (scale[3], shift[3]): normalised = level * scale
// + shift, the spec's mean/std as one multiply-add. `out` is one (3, size, size) image of the batch.
extern "C" __global__ void preprocess(const u8* src, long long step, int height, int width, int encoding,
                                      int big_endian, int crop_x0, int crop_y0, const int* y_start,
                                      const float* y_weights, int y_count, const int* x_start,
                                      const float* x_weights, int x_count, const float* affine, int size,
                                      void* out, int half_output) {
  Image im;
  im.data = src;
  im.step = step;
  im.height = height;
  im.width = width;
  im.big_endian = big_endian;
  Taps ty;
  ty.start = y_start;
  ty.weights = y_weights;
  ty.count = y_count;
  Taps tx;
  tx.start = x_start;
  tx.weights = x_weights;
  tx.count = x_count;
  Output o;
  o.data = out;
  o.half = half_output;
  dispatch(encoding, im, crop_x0, crop_y0, ty, tx, affine, size, o);
}

// Decoding alone: frame pixel (y, x) -> RGB uint8, (height, width, 3). Not used per frame; it lets
// the tests hold every encoding's colour conversion to OpenCV's bit for bit.
template <int ENC>
__device__ void decode_one(const Image& im, u8* out) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= im.width || y >= im.height) return;
  const Rgb p = pixel<ENC>(im, y, x);
  u8* o = out + ((long long)y * im.width + x) * 3;
  o[0] = (u8)p.r;
  o[1] = (u8)p.g;
  o[2] = (u8)p.b;
}

extern "C" __global__ void decode_rgb8(const u8* src, long long step, int height, int width, int encoding,
                                       int big_endian, u8* out) {
  Image im;
  im.data = src;
  im.step = step;
  im.height = height;
  im.width = width;
  im.big_endian = big_endian;
  switch (encoding) {
    case ENC_RGB8: decode_one<ENC_RGB8>(im, out); break;
    case ENC_BGR8: decode_one<ENC_BGR8>(im, out); break;
    case ENC_RGBA8: decode_one<ENC_RGBA8>(im, out); break;
    case ENC_BGRA8: decode_one<ENC_BGRA8>(im, out); break;
    case ENC_GRAY8: decode_one<ENC_GRAY8>(im, out); break;
    case ENC_UYVY: decode_one<ENC_UYVY>(im, out); break;
    case ENC_YUYV: decode_one<ENC_YUYV>(im, out); break;
    case ENC_BAYER_RGGB: decode_one<ENC_BAYER_RGGB>(im, out); break;
    case ENC_BAYER_BGGR: decode_one<ENC_BAYER_BGGR>(im, out); break;
    case ENC_BAYER_GBRG: decode_one<ENC_BAYER_GBRG>(im, out); break;
    case ENC_BAYER_GRBG: decode_one<ENC_BAYER_GRBG>(im, out); break;
    case ENC_NV12: decode_one<ENC_NV12>(im, out); break;
    case ENC_NV21: decode_one<ENC_NV21>(im, out); break;
    case ENC_GRAY16: decode_one<ENC_GRAY16>(im, out); break;
    default: break;
  }
}
