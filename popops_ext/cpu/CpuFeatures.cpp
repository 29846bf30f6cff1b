// snn_ipu._cpu: which x86-64 micro-architecture level the running CPU (and its
// OS: AVX state must be enabled) supports, so that snn_ipu._native can load the
// extension build made for it. Built without any -march flag, so that it runs
// wherever Python does; plain CPython API, so that it builds in a second.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace {

// 0 on other architectures; 1, 2 or 3 for x86-64, -v2 and -v3.
long x86Level() {
#if defined(__x86_64__)
  __builtin_cpu_init();
#if (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12) ||                            \
    (defined(__clang__) && __clang_major__ >= 16)
  if (__builtin_cpu_supports("x86-64-v3"))
    return 3;
  if (__builtin_cpu_supports("x86-64-v2"))
    return 2;
#else
  // Older compilers know the features, not the levels; these are the ones the
  // builds' code generation can use (F16C, MOVBE and LZCNT come with AVX2 and BMI2
  // on every CPU that has both).
  const bool v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt") &&
                  __builtin_cpu_supports("ssse3");
  if (v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2"))
    return 3;
  if (v2)
    return 2;
#endif
  return 1;
#else
  return 0;
#endif
}

PyObject *level(PyObject *, PyObject *) { return PyLong_FromLong(x86Level()); }

PyMethodDef methods[] = {
    {"x86_64_level", level, METH_NOARGS,
     "The x86-64 micro-architecture level this CPU supports (1-3); 0 on other architectures."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu", "CPU features for snn_ipu._native.", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

} // namespace

PyMODINIT_FUNC PyInit__cpu() { return PyModule_Create(&module); }
