# Read by CMake right after llama.cpp's project() when scripts/install builds llama-cpp-python
# (CMAKE_PROJECT_llama.cpp_INCLUDE): llama-cpp-python forces llama.cpp's `common` library on, which only its
# multimodal library (mtmd, off there too) links. The Python package loads neither; the two are about three fifths
# of the compile (docs/dependencies.md).
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
