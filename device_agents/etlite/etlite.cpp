// nnsweep's torch-free ExecuTorch runner: a C interface (for ctypes) over ExecuTorch's own
// C++ runtime, linked against the shared libraries the executorch wheel ships
// (libexecutorch, the XNNPACK backend, the optimized and quantized kernels). Those
// libraries need no PyTorch; only the wheel's Python bindings do. Built by build.sh.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>

// The wheel ships libexecutorch_threadpool.so without its header.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

using executorch::extension::Module;
using executorch::extension::TensorPtr;
using executorch::runtime::EValue;

namespace {

struct Handle {
  std::unique_ptr<Module> module;
  std::vector<TensorPtr> inputs;
  std::vector<EValue> outputs;
};

void set_error(char* err, int errlen, const std::string& message) {
  if (err != nullptr && errlen > 0) {
    std::strncpy(err, message.c_str(), static_cast<size_t>(errlen - 1));
    err[errlen - 1] = '\0';
  }
}

}  // namespace

extern "C" {

// Sizes the threadpool: only before any program is loaded, once per process.
int etl_set_threads(int threads) {
  auto* pool = executorch::extension::threadpool::get_threadpool();
  if (pool == nullptr) return -1;
  return pool->_unsafe_reset_threadpool(static_cast<uint32_t>(threads)) ? 0 : -1;
}

// Registered backends, comma-separated, into buf.
int etl_backends(char* buf, int buflen) {
  std::string names;
  for (size_t i = 0; i < executorch::runtime::get_num_registered_backends(); ++i) {
    auto name = executorch::runtime::get_backend_name(i);
    if (!name.ok()) continue;
    if (!names.empty()) names += ",";
    names += *name;
  }
  set_error(buf, buflen, names);
  return 0;
}

void* etl_open(const char* path, char* err, int errlen) {
  auto handle = std::make_unique<Handle>();
  handle->module = std::make_unique<Module>(path, Module::LoadMode::File);
  auto status = handle->module->load_method("forward");
  if (status != executorch::runtime::Error::Ok) {
    set_error(err, errlen, "load_method(forward) failed: error 0x" + [&] {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%x", static_cast<unsigned>(status));
      return std::string(hex);
    }());
    return nullptr;
  }
  auto meta = handle->module->method_meta("forward");
  if (!meta.ok()) {
    set_error(err, errlen, "method_meta(forward) failed");
    return nullptr;
  }
  handle->inputs.resize(meta->num_inputs());
  return handle.release();
}

int etl_num_inputs(void* h) { return static_cast<int>(static_cast<Handle*>(h)->inputs.size()); }

// Input i borrows data (the caller keeps it alive until etl_run returns).
int etl_set_input(void* h, int i, void* data, int dtype, const int64_t* dims, int ndim) {
  auto* handle = static_cast<Handle*>(h);
  if (i < 0 || static_cast<size_t>(i) >= handle->inputs.size()) return -1;
  std::vector<executorch::aten::SizesType> sizes(dims, dims + ndim);
  handle->inputs[i] = executorch::extension::from_blob(
      data, std::move(sizes), static_cast<executorch::aten::ScalarType>(dtype));
  return 0;
}

int etl_run(void* h, char* err, int errlen) {
  auto* handle = static_cast<Handle*>(h);
  std::vector<EValue> values;
  values.reserve(handle->inputs.size());
  for (auto& t : handle->inputs) {
    if (!t) {
      set_error(err, errlen, "an input was not set");
      return -1;
    }
    values.emplace_back(t);
  }
  auto result = handle->module->execute("forward", values);
  if (!result.ok()) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%x", static_cast<unsigned>(result.error()));
    set_error(err, errlen, std::string("execute(forward) failed: error 0x") + hex);
    return -1;
  }
  handle->outputs = std::move(*result);
  return 0;
}

int etl_num_outputs(void* h) { return static_cast<int>(static_cast<Handle*>(h)->outputs.size()); }

// Output i of the last run: its dtype, shape (up to maxdims) and data (valid until the next run).
int etl_output(void* h, int i, int* dtype, int64_t* dims, int maxdims, int* ndim, const void** data) {
  auto* handle = static_cast<Handle*>(h);
  if (i < 0 || static_cast<size_t>(i) >= handle->outputs.size()) return -1;
  const auto& value = handle->outputs[i];
  if (!value.isTensor()) return -2;
  const auto& tensor = value.toTensor();
  if (tensor.dim() > maxdims) return -3;
  *dtype = static_cast<int>(tensor.scalar_type());
  *ndim = static_cast<int>(tensor.dim());
  for (ssize_t d = 0; d < tensor.dim(); ++d) dims[d] = tensor.size(d);
  *data = tensor.const_data_ptr();
  return 0;
}

void etl_close(void* h) { delete static_cast<Handle*>(h); }

}  // extern "C"
