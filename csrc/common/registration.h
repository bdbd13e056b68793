#pragma once
// `import cute_ops._C` only has to run this library's static initialisers (the TORCH_LIBRARY
// blocks); the module exposes no Python functions, so a bare module object replaces pybind11.
#include <Python.h>

#define CUTE_OPS_CONCAT_(a, b) a##b
#define CUTE_OPS_CONCAT(a, b) CUTE_OPS_CONCAT_(a, b)
#define CUTE_OPS_STRINGIFY_(x) #x
#define CUTE_OPS_STRINGIFY(x) CUTE_OPS_STRINGIFY_(x)

#define CUTE_OPS_REGISTER_EXTENSION(NAME)                                            \
  PyMODINIT_FUNC CUTE_OPS_CONCAT(PyInit_, NAME)() {                                  \
    static PyModuleDef module = {PyModuleDef_HEAD_INIT, CUTE_OPS_STRINGIFY(NAME),    \
                                 nullptr, 0, nullptr};                               \
    return PyModule_Create(&module);                                                 \
  }
