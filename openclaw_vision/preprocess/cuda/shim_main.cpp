// Test driver: runs preprocess.cu's kernels on the CPU through shim.h, one job file at a time.
//   shim_run JOB OUT [JOB OUT ...]
// A job is what openclaw_vision/preprocess/cuda/shim.py writes: 20 little-endian int64 (`Field`),
// then y_start, y_weights, x_start, x_weights, affine, and the raw image bytes. Every array is
// copied into a buffer of exactly its own size, so AddressSanitizer reports any read past the
// image's last byte or a table's last entry.
#include "shim.h"
#include "preprocess.cu"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

enum Field { F_KIND, F_HEIGHT, F_WIDTH, F_STEP, F_ENCODING, F_BIG_ENDIAN, F_CROP_X0, F_CROP_Y0, F_SIZE, F_Y_COUNT, F_X_COUNT,
             F_HALF_OUTPUT, F_SRC_BYTES, F_GRID_X, F_GRID_Y, F_BLOCK_X, F_BLOCK_Y, F_SLOT, F_SLOTS, F_MAGIC, F_FIELDS };
const int64_t kMagic = 0x0c1a57;
const int kTerms = 2;

template <typename T>
T* take(const std::vector<char>& file, size_t& at, size_t count) {
  size_t bytes = count * sizeof(T);
  if (at + bytes > file.size()) {
    std::fprintf(stderr, "job file too short\n");
    std::exit(2);
  }
  T* out = static_cast<T*>(std::malloc(bytes ? bytes : 1));
  std::memcpy(out, file.data() + at, bytes);
  at += bytes;
  return out;
}

int run(const char* job_path, const char* out_path) {
  std::FILE* f = std::fopen(job_path, "rb");
  if (!f) return 2;
  std::vector<char> file;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) file.insert(file.end(), buf, buf + n);
  std::fclose(f);
  size_t at = 0;
  int64_t* h = take<int64_t>(file, at, F_FIELDS);
  if (h[F_MAGIC] != kMagic) return 3;
  const int size = (int)h[F_SIZE];
  int* y_start = take<int>(file, at, h[F_KIND] ? 0 : size);
  float* y_weights = take<float>(file, at, h[F_KIND] ? 0 : (size_t)size * kTerms * h[F_Y_COUNT]);
  int* x_start = take<int>(file, at, h[F_KIND] ? 0 : size);
  float* x_weights = take<float>(file, at, h[F_KIND] ? 0 : (size_t)size * kTerms * h[F_X_COUNT]);
  float* affine = take<float>(file, at, h[F_KIND] ? 0 : 6);
  u8* src = take<u8>(file, at, h[F_SRC_BYTES]);
  // A preprocess job writes row F_SLOT of a (F_SLOTS, 3, S, S) batch, as the GPU path writes row k of the
  // engine's input buffer; the other rows start as 0xFF bytes (NaN) and must come back untouched.
  const size_t slots = h[F_KIND] ? 1 : (size_t)(h[F_SLOTS] > 0 ? h[F_SLOTS] : 1);
  const size_t row_bytes = h[F_KIND] ? (size_t)h[F_HEIGHT] * h[F_WIDTH] * 3 : (size_t)3 * size * size * (h[F_HALF_OUTPUT] ? 2 : 4);
  if (h[F_SLOT] < 0 || (size_t)h[F_SLOT] >= slots) return 4;
  size_t out_bytes = row_bytes * slots;
  void* out = std::malloc(out_bytes);
  std::memset(out, h[F_KIND] ? 0 : 0xff, out_bytes);
  if (h[F_KIND] == 0) {
    void* row = static_cast<char*>(out) + row_bytes * (size_t)h[F_SLOT];
    shim_launch(ShimDim3{(unsigned)h[F_GRID_X], (unsigned)h[F_GRID_Y], 1}, ShimDim3{(unsigned)h[F_BLOCK_X], (unsigned)h[F_BLOCK_Y], 1}, preprocess, src,
                (long long)h[F_STEP], (int)h[F_HEIGHT], (int)h[F_WIDTH], (int)h[F_ENCODING], (int)h[F_BIG_ENDIAN],
                (int)h[F_CROP_X0], (int)h[F_CROP_Y0], y_start, y_weights, (int)h[F_Y_COUNT], x_start, x_weights,
                (int)h[F_X_COUNT], affine, size, row, (int)h[F_HALF_OUTPUT]);
  } else {
    shim_launch(ShimDim3{(unsigned)h[F_GRID_X], (unsigned)h[F_GRID_Y], 1}, ShimDim3{(unsigned)h[F_BLOCK_X], (unsigned)h[F_BLOCK_Y], 1}, decode_rgb8, src,
                (long long)h[F_STEP], (int)h[F_HEIGHT], (int)h[F_WIDTH], (int)h[F_ENCODING], (int)h[F_BIG_ENDIAN],
                (u8*)out);
  }
  std::FILE* o = std::fopen(out_path, "wb");
  if (!o) return 2;
  std::fwrite(out, 1, out_bytes, o);
  std::fclose(o);
  std::free(out);
  std::free(src);
  std::free(affine);
  std::free(x_weights);
  std::free(x_start);
  std::free(y_weights);
  std::free(y_start);
  std::free(h);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc % 2 == 0) {
    std::fprintf(stderr, "usage: %s JOB OUT [JOB OUT ...]\n", argv[0]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    int rc = run(argv[i], argv[i + 1]);
    if (rc) {
      std::fprintf(stderr, "%s: failed (%d)\n", argv[i], rc);
      return rc;
    }
  }
  return 0;
}
