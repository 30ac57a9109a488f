# Fails on any #include between the top-level folders against their order
# (docs/architecture.md, "The map"): each folder may include only itself and
# the folders this table lets it. core/'s own layers are check_core_layers'
# job; tests/ may include anything and nothing includes tests/.
#   cmake -DENGRAM_ROOT=<repository> -P cmake/check_folder_order.cmake
cmake_minimum_required(VERSION 3.20)
if(NOT ENGRAM_ROOT)
  message(FATAL_ERROR "check_folder_order: give -DENGRAM_ROOT=<repository>")
endif()
# folder -> the folders it may include besides itself. The real machine
# (backends/) and the emulator (sim/) never include each other: both sit on
# core/ and meet only in harness/.
set(allowed_kernels core)
set(allowed_backends core kernels)
set(allowed_sim core kernels)
set(allowed_harness core kernels backends sim)
set(allowed_operator_checks core kernels backends)
set(allowed_python core kernels backends sim harness)
set(allowed_apps core kernels backends sim harness operator_checks)
set(allowed_benchmarks core kernels backends sim harness operator_checks)
set(folders kernels backends sim harness operator_checks python apps benchmarks)
set(known core tests ${folders})
set(violations "")
set(files_checked 0)
foreach(folder ${folders})
  file(GLOB_RECURSE folder_files ${ENGRAM_ROOT}/${folder}/*.h ${ENGRAM_ROOT}/${folder}/*.cc
       ${ENGRAM_ROOT}/${folder}/*.cu ${ENGRAM_ROOT}/${folder}/*.cuh)
  foreach(path ${folder_files})
    math(EXPR files_checked "${files_checked} + 1")
    file(RELATIVE_PATH name ${ENGRAM_ROOT} ${path})
    file(STRINGS ${path} includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line ${includes})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*" "\\1" included "${line}")
      if(NOT included MATCHES "^([a-z_]+)/")
        continue()  # a file beside it
      endif()
      set(target ${CMAKE_MATCH_1})
      if(target STREQUAL folder OR NOT target IN_LIST known)
        continue()  # itself, or a library's own folder (gtest/, fmt/, ...)
      endif()
      if(NOT target IN_LIST allowed_${folder})
        list(JOIN allowed_${folder} "/, " allowed_text)
        string(APPEND violations "${name}: #include \"${included}\": ${folder}/ may include only ${folder}/ and "
                                 "${allowed_text}/ (cmake/check_folder_order.cmake); move the code down, or "
                                 "reach it through an interface of core/\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(files_checked EQUAL 0)
  message(FATAL_ERROR "check_folder_order: no file found under ${ENGRAM_ROOT}")
endif()
if(violations)
  message(FATAL_ERROR "includes against the folder order:\n${violations}")
endif()
message(STATUS "check_folder_order: ${files_checked} files outside core/ and tests/ include only the folders below them")
