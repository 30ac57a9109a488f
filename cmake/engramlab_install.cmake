# `cmake --install <build> --prefix P`: engramlab installed like a library.
#   P/bin/engramlab                      the command
#   P/include/engramlab/{core,backends,kernels}/...   the public headers, laid
#                                        out as the code includes them
#                                        ("core/base/status.h")
#   P/lib/libengram_*.a                  the core, the real backends, kernels
#                                        (not operator_checks/: acceptance, bench)
#   P/lib/cmake/engramlab/               the package: find_package(engramlab)
#                                        gives engramlab::core,
#                                        engramlab::host_backend, ...
#   P/share/engramlab/{scenarios,models}/ the scenario and model files
# The emulator (sim/), the harness, the operator checks and the tests are not installed.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ENGRAM_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/engramlab)
set(ENGRAM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/engramlab)
set(ENGRAM_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/engramlab)

install(TARGETS engramlab RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The exported libraries, each as engramlab::<name without engram_>.
set(ENGRAM_EXPORTED_TARGETS engram_core ${ENGRAM_CORE_LAYER_TARGETS} engram_host_backend engram_kernels_cpu)
foreach(optional engram_kernels_cuda engram_cuda_driver engram_cuda_backend)
  if(TARGET ${optional})
    list(APPEND ENGRAM_EXPORTED_TARGETS ${optional})
  endif()
endforeach()
foreach(target ${ENGRAM_EXPORTED_TARGETS})
  string(REGEX REPLACE "^engram_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
install(TARGETS ${ENGRAM_EXPORTED_TARGETS} EXPORT engramlabTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${ENGRAM_INSTALL_INCLUDEDIR})
install(EXPORT engramlabTargets NAMESPACE engramlab:: DESTINATION ${ENGRAM_INSTALL_CMAKEDIR})

# Headers keep their paths relative to the repository root.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/ DESTINATION ${ENGRAM_INSTALL_INCLUDEDIR}/core
        FILES_MATCHING PATTERN "*.h")
set(ENGRAM_INSTALLED_BACKENDS ipc shm memfd)
if(TARGET engram_cuda_backend)
  list(APPEND ENGRAM_INSTALLED_BACKENDS cuda)
endif()
foreach(backend ${ENGRAM_INSTALLED_BACKENDS})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/backends/${backend}/ DESTINATION ${ENGRAM_INSTALL_INCLUDEDIR}/backends/${backend}
          FILES_MATCHING PATTERN "*.h")
endforeach()
# The CUDA backend's headers include the kernels' (kernels/gather_kernels.h);
# not the kernels' internal headers.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/kernels/ DESTINATION ${ENGRAM_INSTALL_INCLUDEDIR}/kernels
        FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh" PATTERN "gather_launch.h" EXCLUDE PATTERN "gather_rows.cuh" EXCLUDE PATTERN "v41_fast_path.h" EXCLUDE
        PATTERN "v41_row.cuh" EXCLUDE)

# Data: scenario files, and the model files where this tree has them.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/scenarios DESTINATION ${ENGRAM_INSTALL_DATADIR})
if(EXISTS ${PROJECT_SOURCE_DIR}/models)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/models DESTINATION ${ENGRAM_INSTALL_DATADIR})
endif()

# The package config: finds what the exported targets link against.
set(ENGRAM_CONFIG_HAVE_CUDA OFF)
if(TARGET engram_cuda_backend OR TARGET engram_kernels_cuda)
  set(ENGRAM_CONFIG_HAVE_CUDA ON)
endif()
set(ENGRAM_CONFIG_CUDA_ROOT "")
if(ENGRAM_CONFIG_HAVE_CUDA AND CUDAToolkit_BIN_DIR)
  get_filename_component(ENGRAM_CONFIG_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/engramlabConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/engramlabConfig.cmake
                              INSTALL_DESTINATION ${ENGRAM_INSTALL_CMAKEDIR}
                              PATH_VARS ENGRAM_INSTALL_INCLUDEDIR ENGRAM_INSTALL_DATADIR)
# 0.x: a minor release may change the API, so only the same major.minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/engramlabConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/engramlabConfig.cmake ${PROJECT_BINARY_DIR}/engramlabConfigVersion.cmake
        DESTINATION ${ENGRAM_INSTALL_CMAKEDIR})
