# Included right after llama.cpp's project() when llama-cpp-python is compiled (CMAKE_ARGS in scripts/_env.sh:
# -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>). llama-cpp-python forces LLAMA_BUILD_COMMON on (a cache variable),
# but its Python package never loads llama.cpp's common library: it loads libllama and the ggml libraries (and
# libmtmd, lazily, for image chats only). common and the cpp-httplib it pulls in are about three quarters of the
# compile (bench/bench_llama_build.py). A normal variable shadows the cache entry in llama.cpp's directory, so
# `if (LLAMA_BUILD_COMMON)` there skips them, and their install rules with them.
set(LLAMA_BUILD_COMMON OFF)
