// .npy reading and writing: round trips, numpy interoperability both ways (numpy writes, we read;
// we write, numpy loads), committed numpy fixtures, and every rejection with its message.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "cuflash/io/convert.h"
#include "cuflash/io/npy.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using cuflash::io::ElementType;
using cuflash::io::NpyArray;
using cuflash::io::NpyError;
using cuflash::io::ReadOptions;

namespace {

// --- Helpers -----------------------------------------------------------------------------------

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::random_device random;
    do {
      path_ = fs::temp_directory_path() /
              ("cuflash-npy-test-" + std::to_string(random()) + std::to_string(random()));
    } while (!fs::create_directory(path_));
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::vector<std::string> directory_entries(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs a shell command; returns its exit status and, in `output`, what it printed.
int run_command(const std::string& command, std::string& output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  output.clear();
  while (const size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, got);
  return pclose(pipe);
}

// The interop tests need numpy: without it they fail (CI installs python3-numpy), never skip.
void require_numpy() {
  static const bool has_numpy = [] {
    std::string output;
    return run_command(shell_quote(CUFLASH_TEST_PYTHON) + " -c 'import numpy'", output) == 0;
  }();
  if (!has_numpy) {
    FAIL("the interpreter " << CUFLASH_TEST_PYTHON
                            << " (CUFLASH_TEST_PYTHON) cannot import numpy: install python3-numpy");
  }
}

// Runs `script` with numpy's interpreter; sys.argv[1] is `dir`. The script signals a mismatch
// by failing (assert), and its output is shown on failure.
void run_numpy_script(const TempDir& dir, const std::string& script) {
  require_numpy();
  const std::string script_path = dir.file("script.py");
  std::ofstream(script_path) << script;
  std::string output;
  const int status = run_command(shell_quote(CUFLASH_TEST_PYTHON) + " " +
                                     shell_quote(script_path) + " " +
                                     shell_quote(dir.path().string()),
                                 output);
  INFO("python output:\n" << output);
  REQUIRE(status == 0);
}

// The values every numpy-made fixture holds: value[i] = (i - 3) / 4 at C-order flat index i,
// exact in fp16, bf16, fp32 and fp64.
double fixture_value(int64_t flat_index) { return (static_cast<double>(flat_index) - 3) / 4; }

std::vector<double> fixture_values(int64_t count) {
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = fixture_value(i);
  return values;
}

void check_fixture(const NpyArray& array, ElementType type, const std::vector<int64_t>& shape) {
  CHECK(array.type == type);
  CHECK(array.shape == shape);
  CHECK(cuflash::io::to_double(array) == fixture_values(array.element_count()));
}

// Python side of the fixture formula, shared by the interop scripts.
const char* const kPythonPrelude = R"PY(
import io, os, sys
import numpy as np
d = sys.argv[1]

def values(shape, dtype="<f8"):
    count = int(np.prod(shape))
    return ((np.arange(count) - 3) / 4).reshape(shape).astype(dtype)

def bf16_bits(array):  # exact values: truncating the float32 bits is the bf16 encoding
    return (array.astype("<f4").view("<u4") >> 16).astype("<u2")

def save(name, array, version=None):
    with open(os.path.join(d, name), "wb") as f:
        np.lib.format.write_array(f, array, version=version)
)PY";

// A file image with an arbitrary header dict, for the rejection tests. The dict is padded the
// way numpy pads it unless `pad` is false.
std::vector<unsigned char> npy_image(const std::string& dict, size_t data_bytes = 0,
                                     int major = 1, bool pad = true) {
  const size_t length_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  if (pad) {
    const size_t used = 8 + length_bytes + header.size() + 1;
    header.append((64 - used % 64) % 64, ' ');
    header += '\n';
  }
  std::vector<unsigned char> image = {0x93, 'N', 'U', 'M', 'P', 'Y',
                                      static_cast<unsigned char>(major), 0};
  for (size_t i = 0; i < length_bytes; ++i) image.push_back((header.size() >> (8 * i)) & 0xff);
  image.insert(image.end(), header.begin(), header.end());
  image.resize(image.size() + data_bytes, 0);
  return image;
}

std::string dict_text(const std::string& descr, const std::string& shape,
                      const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

NpyArray parse(const std::vector<unsigned char>& image, const ReadOptions& options = {}) {
  return cuflash::io::parse_npy(image.data(), image.size(), "mem.npy", options);
}

// Both entry points must refuse `image` with a one-line message that starts with the name they
// were given and names the problem.
void require_rejected(const std::vector<unsigned char>& image, const std::string& problem,
                      const ReadOptions& options = {}) {
  auto check_message = [&](const std::string& message, const std::string& name) {
    CHECK_THAT(message, StartsWith(name + ": ") && Contains(problem));
    CHECK(message.find('\n') == std::string::npos);
  };
  try {
    cuflash::io::parse_npy(image.data(), image.size(), "bad.npy", options);
    FAIL("parse_npy accepted an image that should fail with: " << problem);
  } catch (const NpyError& e) {
    check_message(e.what(), "bad.npy");
  }
  const TempDir dir;
  const std::string path = dir.file("bad.npy");
  write_file(path, image);
  try {
    cuflash::io::read_npy(path, options);
    FAIL("read_npy accepted a file that should fail with: " << problem);
  } catch (const NpyError& e) {
    check_message(e.what(), path);
  }
}

NpyArray patterned_array(ElementType type, std::vector<int64_t> shape) {
  NpyArray array;
  array.type = type;
  array.shape = std::move(shape);
  array.bytes.resize(static_cast<size_t>(array.element_count()) *
                     static_cast<size_t>(cuflash::io::element_size(type)));
  std::mt19937 random(42);  // any bit pattern, NaN payloads included, must survive unchanged
  for (auto& byte : array.bytes) byte = static_cast<unsigned char>(random());
  return array;
}

void check_same(const NpyArray& actual, const NpyArray& expected) {
  CHECK(actual.type == expected.type);
  CHECK(actual.shape == expected.shape);
  CHECK(actual.bytes == expected.bytes);
}

const ElementType kAllTypes[] = {ElementType::f16, ElementType::bf16, ElementType::f32,
                                 ElementType::f64};

}  // namespace

// --- Round trips and layout --------------------------------------------------------------------

TEST_CASE("npy: every type and shape survives serialize/parse and write/read", "[npy]") {
  const TempDir dir;
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {7}, {2, 3}, {2, 0, 5},
                                                    {2, 3, 4}, {1, 1, 1, 1, 5}};
  for (const ElementType type : kAllTypes) {
    for (const auto& shape : shapes) {
      const NpyArray array = patterned_array(type, shape);
      INFO(cuflash::io::to_string(type) << " rank " << shape.size());
      const std::vector<unsigned char> image = cuflash::io::serialize_npy(array);
      check_same(parse(image), array);
      const std::string path = dir.file("round_trip.npy");
      cuflash::io::write_npy(path, array);
      check_same(cuflash::io::read_npy(path), array);
      CHECK(read_file(path) == image);
    }
  }
}

TEST_CASE("npy: the header is padded as numpy pads it", "[npy]") {
  const NpyArray array = patterned_array(ElementType::f32, {2, 3});
  const std::vector<unsigned char> image = cuflash::io::serialize_npy(array);
  REQUIRE(image.size() > 10);
  CHECK(image[6] == 1);  // version 1.0
  CHECK(image[7] == 0);
  const size_t header_end = 10 + image[8] + (size_t(image[9]) << 8);
  CHECK(header_end % 64 == 0);
  CHECK(image[header_end - 1] == '\n');
  CHECK(image.size() == header_end + array.bytes.size());
  const std::string dict(image.begin() + 10, image.begin() + header_end);
  CHECK_THAT(dict, StartsWith("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
}

TEST_CASE("npy: a header too long for version 1.0 is written as version 2.0", "[npy]") {
  const std::vector<int64_t> shape(30000, 1);  // "1, " per dimension: over 64 KiB of header
  const NpyArray array = patterned_array(ElementType::f16, shape);
  const std::vector<unsigned char> image = cuflash::io::serialize_npy(array);
  CHECK(image[6] == 2);
  const size_t header_end = 12 + (image[8] | size_t(image[9]) << 8 | size_t(image[10]) << 16);
  CHECK(header_end % 64 == 0);
  check_same(parse(image), array);
}

TEST_CASE("npy: the element type names and sizes", "[npy]") {
  CHECK(cuflash::io::element_size(ElementType::f16) == 2);
  CHECK(cuflash::io::element_size(ElementType::bf16) == 2);
  CHECK(cuflash::io::element_size(ElementType::f32) == 4);
  CHECK(cuflash::io::element_size(ElementType::f64) == 8);
  CHECK(std::string(cuflash::io::to_string(ElementType::bf16)) == "bf16");
  CHECK(std::string(cuflash::io::to_string(ElementType::f64)) == "f64");
}

// --- Files numpy wrote -------------------------------------------------------------------------

TEST_CASE("npy: reads the committed numpy fixtures", "[npy]") {
  const std::string data = CUFLASH_TEST_DATA_DIR;
  auto read = [&](const char* name) { return cuflash::io::read_npy(data + "/" + name); };
  check_fixture(read("f32_v1_2x3.npy"), ElementType::f32, {2, 3});
  check_fixture(read("f16_v2_2x3.npy"), ElementType::f16, {2, 3});
  check_fixture(read("f64_v3_2x3.npy"), ElementType::f64, {2, 3});
  check_fixture(read("f32_big_endian_2x3.npy"), ElementType::f32, {2, 3});
  check_fixture(read("f32_fortran_2x3x4.npy"), ElementType::f32, {2, 3, 4});
  check_fixture(read("bf16_int16_2x3.npy"), ElementType::bf16, {2, 3});
  check_fixture(read("bf16_void_2x3.npy"), ElementType::bf16, {2, 3});
  check_fixture(read("f32_empty_0x3.npy"), ElementType::f32, {0, 3});
  const NpyArray scalar = read("f16_scalar.npy");
  CHECK(scalar.shape.empty());
  CHECK(cuflash::io::to_double(scalar) == std::vector<double>{1.5});
}

TEST_CASE("npy: reads what numpy writes (versions, byte orders, Fortran order, bf16 as int16)",
          "[npy][numpy]") {
  const TempDir dir;
  run_numpy_script(dir, std::string(kPythonPrelude) + R"PY(
a = values((2, 3, 4))
for version in [(1, 0), (2, 0), (3, 0)]:
    for code in ["f2", "f4", "f8"]:
        save("v%d_%s.npy" % (version[0], code), a.astype("<" + code), version)
        save("big_v%d_%s.npy" % (version[0], code), a.astype(">" + code), version)
        save("fortran_v%d_%s.npy" % (version[0], code), np.asfortranarray(a.astype("<" + code)),
             version)
save("fortran_big_f8.npy", np.asfortranarray(a.astype(">f8")))
save("fortran_2d_f4.npy", np.asfortranarray(values((5, 7), "<f4")))
save("fortran_ones_f4.npy", np.asfortranarray(values((2, 1, 3, 1, 4), "<f4")))
save("bf16_int16.npy", bf16_bits(a).view("<i2"))
save("bf16_uint16.npy", bf16_bits(a))
save("bf16_big_int16.npy", bf16_bits(a).astype(">i2"))
save("bf16_void.npy", bf16_bits(a).view("V2"))
save("bf16_fortran_int16.npy", np.asfortranarray(bf16_bits(a).view("<i2")))
save("scalar_f8.npy", np.array(-0.75))
save("empty_f4.npy", np.zeros((3, 0, 2), dtype="<f4"))
save("vector_f2.npy", values((9,), "<f2"))
)PY");
  auto read = [&](const std::string& name) {
    INFO(name);
    return cuflash::io::read_npy(dir.file(name));
  };
  const std::vector<int64_t> shape = {2, 3, 4};
  const std::pair<const char*, ElementType> codes[] = {
      {"f2", ElementType::f16}, {"f4", ElementType::f32}, {"f8", ElementType::f64}};
  for (const int version : {1, 2, 3}) {
    for (const auto& [code, type] : codes) {
      const std::string suffix = "v" + std::to_string(version) + "_" + code + ".npy";
      INFO(suffix);
      check_fixture(read(suffix), type, shape);
      check_fixture(read("big_" + suffix), type, shape);
      check_fixture(read("fortran_" + suffix), type, shape);
    }
  }
  check_fixture(read("fortran_big_f8.npy"), ElementType::f64, shape);
  check_fixture(read("fortran_2d_f4.npy"), ElementType::f32, {5, 7});
  check_fixture(read("fortran_ones_f4.npy"), ElementType::f32, {2, 1, 3, 1, 4});
  for (const char* name : {"bf16_int16.npy", "bf16_uint16.npy", "bf16_big_int16.npy",
                           "bf16_void.npy", "bf16_fortran_int16.npy"}) {
    INFO(name);
    check_fixture(read(name), ElementType::bf16, shape);
  }
  CHECK(cuflash::io::to_double(read("scalar_f8.npy")) == std::vector<double>{-0.75});
  check_fixture(read("empty_f4.npy"), ElementType::f32, {3, 0, 2});
  check_fixture(read("vector_f2.npy"), ElementType::f16, {9});

  ReadOptions strict;
  strict.two_byte_as_bf16 = false;
  CHECK_THROWS_WITH(cuflash::io::read_npy(dir.file("bf16_int16.npy"), strict),
                    StartsWith(dir.file("bf16_int16.npy")) && Contains("unsupported dtype '<i2'"));
}

// --- Files numpy loads -------------------------------------------------------------------------

TEST_CASE("npy: numpy loads what we write, byte for byte what np.save writes", "[npy][numpy]") {
  const TempDir dir;
  const std::vector<int64_t> shape = {2, 3, 4};
  const std::vector<double> values = fixture_values(24);
  for (const ElementType type : kAllTypes) {
    cuflash::io::write_npy(dir.file(std::string("ours_") + cuflash::io::to_string(type) + ".npy"),
                           cuflash::io::from_double(values, shape, type));
  }
  cuflash::io::write_npy(dir.file("ours_scalar.npy"),
                         cuflash::io::from_double({2.5}, {}, ElementType::f32));
  cuflash::io::write_npy(dir.file("ours_empty.npy"),
                         cuflash::io::from_double({}, {4, 0}, ElementType::f16));
  run_numpy_script(dir, std::string(kPythonPrelude) + R"PY(
def check(name, expected):
    path = os.path.join(d, name)
    loaded = np.load(path)
    assert loaded.dtype == expected.dtype, (name, loaded.dtype, expected.dtype)
    assert loaded.shape == expected.shape, (name, loaded.shape)
    assert loaded.tobytes() == expected.tobytes(), name
    buffer = io.BytesIO()
    np.save(buffer, expected)
    assert open(path, "rb").read() == buffer.getvalue(), name + ": differs from np.save"

a = values((2, 3, 4))
check("ours_f16.npy", a.astype("<f2"))
check("ours_f32.npy", a.astype("<f4"))
check("ours_f64.npy", a)
check("ours_bf16.npy", bf16_bits(a).view("V2"))
check("ours_scalar.npy", np.array(2.5, dtype="<f4"))
check("ours_empty.npy", np.zeros((4, 0), dtype="<f2"))

# What a PyTorch user does (torch.from_numpy(np.load(f).view(np.int16)).view(torch.bfloat16)):
# the int16 view holds the bf16 bits, which widen to the exact float32 values.
bits = np.load(os.path.join(d, "ours_bf16.npy")).view(np.int16)
assert bits.dtype == np.int16 and bits.shape == (2, 3, 4)
widened = (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
assert np.array_equal(widened, a.astype(np.float32))
print("ok")
)PY");
}

TEST_CASE("npy: fp16 rounding from double matches numpy's astype(float16)", "[npy][numpy]") {
  // Values just beside fp16 rounding ties catch a double -> float -> half double rounding.
  std::vector<double> values;
  for (int k = 0; k < 64; ++k) {
    const double tie = 1 + (2 * k + 1) * std::ldexp(1.0, -11);  // halfway between fp16 values
    for (const double nudge : {0.0, std::ldexp(1.0, -40), -std::ldexp(1.0, -40)}) {
      values.push_back(tie + nudge);
      values.push_back(-(tie + nudge) * 1024);
      values.push_back((tie + nudge) * std::ldexp(1.0, -20));  // fp16 subnormal range
    }
  }
  for (const double edge : {65504.0, 65519.99, 65520.0, 1e6, 1e-9, 0.0, -0.0}) {
    values.push_back(edge);
  }
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> uniform(-70000.0, 70000.0);
  for (int i = 0; i < 2000; ++i) values.push_back(uniform(random) * std::ldexp(1.0, -(i % 40)));

  const TempDir dir;
  const std::vector<int64_t> shape = {static_cast<int64_t>(values.size())};
  cuflash::io::write_npy(dir.file("doubles.npy"),
                         cuflash::io::from_double(values, shape, ElementType::f64));
  run_numpy_script(dir, R"PY(
import os, sys
import numpy as np
d = sys.argv[1]
np.save(os.path.join(d, "halves.npy"), np.load(os.path.join(d, "doubles.npy")).astype(np.float16))
)PY");
  const NpyArray numpy_halves = cuflash::io::read_npy(dir.file("halves.npy"));
  const NpyArray our_halves = cuflash::io::from_double(values, shape, ElementType::f16);
  REQUIRE(numpy_halves.type == ElementType::f16);
  CHECK(our_halves.bytes == numpy_halves.bytes);
}

// --- Accepted variations -----------------------------------------------------------------------

TEST_CASE("npy: any padding, quoting, key order and spelling numpy would accept", "[npy]") {
  const std::vector<double> expected = fixture_values(6);
  auto values_of = [](const std::vector<unsigned char>& image) {
    return cuflash::io::to_double(parse(image));
  };
  const std::vector<unsigned char> data =
      cuflash::io::from_double(expected, {2, 3}, ElementType::f32).bytes;
  auto with_data = [&](std::vector<unsigned char> image) {
    image.insert(image.end(), data.begin(), data.end());
    return image;
  };
  const std::string plain = dict_text("<f4", "(2, 3)");
  CHECK(values_of(with_data(npy_image(plain, 0, 1, false))) == expected);  // no padding at all
  CHECK(values_of(with_data(npy_image(plain + "\t \r\n  ", 0, 1, false))) == expected);
  CHECK(values_of(with_data(npy_image(plain, 0, 2))) == expected);
  CHECK(values_of(with_data(npy_image(plain, 0, 3))) == expected);
  CHECK(values_of(with_data(npy_image(
            "{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<f4\"}"))) == expected);
  CHECK(values_of(with_data(npy_image(dict_text("=f4", "(2, 3)")))) == expected);
  CHECK(values_of(with_data(npy_image(dict_text("f4", "(2, 3)")))) == expected);
  CHECK(values_of(with_data(npy_image(dict_text("<f4", "(2L, 3L)")))) == expected);  // Python 2
  CHECK(values_of(with_data(npy_image(dict_text("<f4", "(1, 2, 3)")))) == expected);
  CHECK(values_of(with_data(npy_image(dict_text("<f4", "(2, 3, )")))) == expected);

  const std::vector<unsigned char> bits =
      cuflash::io::from_double(expected, {6}, ElementType::bf16).bytes;
  for (const char* descr : {"|V2", "<V2", "=V2", "<i2", "<u2", "=i2"}) {
    INFO(descr);
    std::vector<unsigned char> image = npy_image(dict_text(descr, "(6,)"));
    image.insert(image.end(), bits.begin(), bits.end());
    const NpyArray array = parse(image);
    CHECK(array.type == ElementType::bf16);
    CHECK(cuflash::io::to_double(array) == expected);
  }
}

TEST_CASE("npy: thousands of unit dimensions in Fortran order stay cheap", "[npy]") {
  std::string shape = "(";
  for (int i = 0; i < 20000; ++i) shape += "1, ";
  shape += "64, 64)";
  std::vector<unsigned char> image = npy_image(dict_text("<f2", shape, "True"), 64 * 64 * 2, 2);
  const NpyArray array = parse(image);
  CHECK(array.shape.size() == 20002);
  CHECK(array.element_count() == 64 * 64);
}

// --- Rejections --------------------------------------------------------------------------------

TEST_CASE("npy: rejects files that are not .npy or of an unknown version", "[npy][reject]") {
  require_rejected({}, "not a .npy file (bad magic)");
  require_rejected({'G', 'I', 'F', '8', '9', 'a', 1, 0, 0, 0}, "bad magic");
  require_rejected({0x93, 'N', 'U', 'M', 'P', 'Y'}, "file ends inside the format version");
  std::vector<unsigned char> image = npy_image(dict_text("<f4", "(1,)"), 4);
  const std::pair<int, int> unknown_versions[] = {{4, 0}, {0, 0}, {1, 1}, {255, 255}};
  for (const auto& [major, minor] : unknown_versions) {
    image[6] = static_cast<unsigned char>(major);
    image[7] = static_cast<unsigned char>(minor);
    require_rejected(image, "unknown .npy format version " + std::to_string(major) + "." +
                                std::to_string(minor));
  }
  require_rejected({0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 16, 0},
                   "file ends inside the header length");
}

TEST_CASE("npy: rejects a header longer than the file or absurdly long", "[npy][reject]") {
  std::vector<unsigned char> image = npy_image(dict_text("<f4", "(1,)"), 4);
  image.resize(40);  // cut inside the header
  require_rejected(image, "is longer than the file");

  std::vector<unsigned char> huge = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0x7f};
  require_rejected(huge, "absurdly long");
  huge.resize(huge.size() + 100, ' ');
  require_rejected(huge, "absurdly long");
}

TEST_CASE("npy: rejects malformed header dicts", "[npy][reject]") {
  const std::string descr = "'descr': '<f4'";
  const std::string fortran = "'fortran_order': False";
  const std::string shape = "'shape': (2,)";
  const std::pair<std::string, std::string> cases[] = {
      {"[1, 2]", "header is not a dict"},
      {"", "header is not a dict"},
      {"{" + descr + ", " + fortran + "}", "missing key 'shape'"},
      {"{" + fortran + ", " + shape + "}", "missing key 'descr'"},
      {"{" + descr + ", " + shape + "}", "missing key 'fortran_order'"},
      {"{}", "missing key"},
      {"{" + descr + ", " + fortran + ", " + shape + ", 'extra': 1}", "unexpected key 'extra'"},
      {"{" + descr + ", " + fortran + ", " + shape + ", " + shape + "}", "duplicate key 'shape'"},
      {"{" + descr + ", 'fortran_order': 0, " + shape + "}",
       "'fortran_order' is not True or False"},
      {"{" + descr + ", 'fortran_order': Falsehood, " + shape + "}", "is not True or False"},
      {"{" + descr + ", " + fortran + ", 'shape': [2]}", "'shape' is not a tuple"},
      {"{" + descr + ", " + fortran + ", 'shape': (2)}", "'shape' is not a tuple"},
      {"{" + descr + ", " + fortran + ", 'shape': ('2',)}", "other than integers"},
      {"{" + descr + ", " + fortran + ", 'shape': (2.5,)}", "expected ',' or ')'"},
      {"{" + descr + ", " + fortran + ", 'shape': (2,) 'x'}", "expected ',' or '}'"},
      {"{" + descr + ", " + fortran + ", " + shape, "expected ',' or '}'"},
      {"{" + descr + ", " + fortran + ", " + shape + "} junk", "unexpected text after the header"},
      {"{'descr: '<f4', " + fortran + ", " + shape + "}", "expected ':'"},
      {"{'descr': '<f4", "unterminated string"},
      {"{'descr': 5, " + fortran + ", " + shape + "}", "'descr' is not a string"},
      {"{descr: '<f4', " + fortran + ", " + shape + "}", "expected a quoted key"},
      {"{'descr': '<f\\x34', " + fortran + ", " + shape + "}", "escape sequences"},
  };
  for (const auto& [dict, problem] : cases) {
    INFO(dict);
    require_rejected(npy_image(dict, 8), problem);
  }
  // Python 3 (format 3.0) has no 'L' suffix on integers.
  require_rejected(npy_image(dict_text("<f4", "(2L,)"), 8, 3), "expected ',' or ')'");
}

TEST_CASE("npy: rejects unsupported dtypes", "[npy][reject]") {
  const std::pair<std::string, std::string> cases[] = {
      {"|O", "object arrays (dtype '|O') are not supported"},
      {"<U8", "string arrays (dtype '<U8') are not supported"},
      {"|S3", "string arrays"},
      {"<i4", "unsupported dtype '<i4'"},
      {"<c8", "unsupported dtype '<c8'"},
      {"|b1", "unsupported dtype '|b1'"},
      {"<f16", "unsupported dtype '<f16'"},
      {"|V4", "unsupported dtype '|V4'"},
      {"|f4", "byte-order mark '|' is not valid for dtype '|f4'"},
      {">V2", "big-endian opaque bf16"},
      {"<", "is not a valid dtype"},
      {"", "is not a valid dtype"},
      {"\x01\xff", "unsupported dtype '\\x01\\xff'"},
  };
  for (const auto& [descr, problem] : cases) {
    INFO(descr);
    require_rejected(npy_image(dict_text(descr, "(2,)"), 16), problem);
  }
  require_rejected(npy_image("{'descr': [('x', '<f4'), ('y', '<i2')], 'fortran_order': False, "
                             "'shape': (2,), }",
                             12),
                   "structured dtypes (descr is a list) are not supported");

  ReadOptions strict;
  strict.two_byte_as_bf16 = false;
  for (const char* descr : {"|V2", "<i2", "<u2", ">i2"}) {
    require_rejected(npy_image(dict_text(descr, "(2,)"), 4),
                     "unsupported dtype '" + std::string(descr) + "'", strict);
  }
}

TEST_CASE("npy: rejects negative and overflowing shapes", "[npy][reject]") {
  require_rejected(npy_image(dict_text("<f4", "(-1, 3)")), "negative dimension in 'shape'");
  require_rejected(npy_image(dict_text("<f4", "(2, -0, -3)")), "negative dimension");
  require_rejected(
      npy_image(dict_text("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 1099511627776, 1099511627776)")),
      "shape (1, 1, 1, 1, 1, 1, 1, 1, ...) of 10 dimensions is too large");
  require_rejected(npy_image(dict_text("<f4", "(99999999999999999999999,)")),
                   "does not fit in 64 bits");
  require_rejected(npy_image(dict_text("<f4", "(9223372036854775808,)")),
                   "does not fit in 64 bits");
  require_rejected(npy_image(dict_text("<f8", "(1099511627776, 1099511627776)")),
                   "is too large (byte count overflows)");
  require_rejected(npy_image(dict_text("<f2", "(0, 4611686018427387904, 4)")),
                   "is too large (byte count overflows)");
  // Fits in 64 bits but not in the file: refused before any allocation is attempted.
  require_rejected(npy_image(dict_text("<f4", "(268435456, 268435456)"), 64),
                   "truncated data: shape (268435456, 268435456) of f32 needs "
                   "288230376151711744 bytes, the file holds 64");
}

TEST_CASE("npy: rejects truncated data, trailing garbage and data over the limit",
          "[npy][reject]") {
  require_rejected(npy_image(dict_text("<f4", "(2, 3)"), 23),
                   "truncated data: shape (2, 3) of f32 needs 24 bytes, the file holds 23");
  require_rejected(npy_image(dict_text("<f4", "(2, 3)"), 0), "truncated data");
  require_rejected(npy_image(dict_text("<f4", "(2, 3)"), 25),
                   "trailing garbage: 1 bytes after the data");
  require_rejected(npy_image(dict_text("<f4", "()"), 0), "truncated data");
  ReadOptions small;
  small.max_bytes = 16;
  require_rejected(npy_image(dict_text("<f4", "(2, 3)"), 24),
                   "data section of 24 bytes exceeds the limit of 16 bytes", small);
}

TEST_CASE("npy: read_npy_info gives read_npy's type and shape and refuses what it refuses",
          "[npy]") {
  const std::string data = CUFLASH_TEST_DATA_DIR;
  for (const char* name : {"f32_v1_2x3.npy", "f16_v2_2x3.npy", "f64_v3_2x3.npy",
                           "f32_big_endian_2x3.npy", "f32_fortran_2x3x4.npy",
                           "bf16_int16_2x3.npy", "bf16_void_2x3.npy", "f16_scalar.npy"}) {
    INFO(name);
    const cuflash::io::NpyInfo info = cuflash::io::read_npy_info(data + "/" + name);
    const NpyArray array = cuflash::io::read_npy(data + "/" + name);
    CHECK(info.type == array.type);
    CHECK(info.shape == array.shape);
  }
  const TempDir dir;
  for (const size_t data_bytes : {size_t(23), size_t(25)}) {  // truncated, trailing garbage
    const std::string path = dir.file("bad.npy");
    write_file(path, npy_image(dict_text("<f4", "(2, 3)"), data_bytes));
    CHECK_THROWS_AS(cuflash::io::read_npy_info(path), NpyError);
  }
  CHECK_THROWS_WITH(cuflash::io::read_npy_info(dir.file("missing.npy")), Contains("cannot open"));
}

TEST_CASE("npy: file errors name the path", "[npy][reject]") {
  const TempDir dir;
  const std::string missing = dir.file("missing.npy");
  CHECK_THROWS_WITH(cuflash::io::read_npy(missing),
                    StartsWith(missing + ": ") && Contains("cannot open"));
  CHECK_THROWS_WITH(cuflash::io::read_npy(dir.path().string()),
                    StartsWith(dir.path().string() + ": ") && Contains("is a directory"));
  // A named pipe with no writer: refused at once (opening it for reading must not wait).
  const std::string pipe = dir.file("pipe.npy");
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(cuflash::io::read_npy_info(pipe),
                    StartsWith(pipe + ": ") && Contains("is not a regular file"));
  CHECK_THROWS_WITH(cuflash::io::read_npy(pipe), Contains("is not a regular file"));
}

// --- Writing -----------------------------------------------------------------------------------

TEST_CASE("npy: write_npy replaces a file atomically and leaves nothing else", "[npy][write]") {
  const TempDir dir;
  const std::string path = dir.file("out.npy");
  cuflash::io::write_npy(path, patterned_array(ElementType::f32, {4}));
  const NpyArray second = patterned_array(ElementType::f64, {3, 2});
  cuflash::io::write_npy(path, second);
  check_same(cuflash::io::read_npy(path), second);
  CHECK(directory_entries(dir.path()) == std::vector<std::string>{"out.npy"});

  // A path without a directory part: the temporary file goes to the working directory.
  struct RemoveOnExit {
    std::string path;
    ~RemoveOnExit() { std::remove(path.c_str()); }
  } relative{"cuflash-test-" + std::to_string(std::random_device()()) + ".npy"};
  cuflash::io::write_npy(relative.path, second);
  check_same(cuflash::io::read_npy(relative.path), second);
}

TEST_CASE("npy: a failed write names the path and leaves no file", "[npy][write]") {
  const TempDir dir;
  const NpyArray array = patterned_array(ElementType::f16, {2, 2});

  const std::string no_directory = dir.file("absent/out.npy");
  CHECK_THROWS_WITH(cuflash::io::write_npy(no_directory, array),
                    StartsWith(no_directory + ": ") && Contains("cannot create a temporary file"));

  const std::string occupied = dir.file("a_directory");
  fs::create_directory(occupied);
  fs::create_directory(occupied + "/inside");  // rename() cannot replace a non-empty directory
  CHECK_THROWS_WITH(cuflash::io::write_npy(occupied, array),
                    StartsWith(occupied + ": ") && Contains("cannot replace"));

  NpyArray inconsistent = array;
  inconsistent.bytes.pop_back();
  const std::string path = dir.file("inconsistent.npy");
  CHECK_THROWS_WITH(cuflash::io::write_npy(path, inconsistent),
                    StartsWith(path + ": ") &&
                        Contains("array holds 7 bytes but shape (2, 2) of f16 needs 8"));
  CHECK_THROWS_WITH(cuflash::io::serialize_npy(inconsistent),
                    StartsWith("serialize_npy: ") && Contains("holds 7 bytes"));
  NpyArray negative = array;
  negative.shape = {-2, -2};
  CHECK_THROWS_WITH(cuflash::io::write_npy(path, negative),
                    StartsWith(path + ": ") && Contains("negative dimension"));

  CHECK(directory_entries(dir.path()) == std::vector<std::string>{"a_directory"});
}
