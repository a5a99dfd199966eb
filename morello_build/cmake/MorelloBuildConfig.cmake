# MorelloBuild CMake package: find_package(MorelloBuild CONFIG REQUIRED), then
#   morello_add_kernel(<target> SPEC "<spec>" [NAME fn] [NAMESPACE ns] [ISA isa] [DB path] [TEST] [BENCHMARK])
# (see MorelloBuildFunctions.cmake). This file lives in the morello_build package; a thin copy in
# <prefix>/share/cmake/MorelloBuild/ (installed from the wheel) locates it. Reached directly (e.g.
# -DMorelloBuild_DIR=<site-packages>/morello_build/cmake), it finds the interpreter itself.
#
# Results (variables in the calling scope; also global properties MORELLO_BUILD_*):
#   MorelloBuild_VERSION      the package version
#   MorelloBuild_PYTHON       the interpreter that runs the generator (override: -DMorelloBuild_PYTHON=)
#   MorelloBuild_PACKAGE_DIR  the morello_build package directory
#   MorelloBuild_CMAKE_DIR    this directory
#   MorelloBuild_ISAS         the accepted ISA values
if(CMAKE_VERSION VERSION_LESS 3.23)
  set(MorelloBuild_FOUND FALSE)
  set(MorelloBuild_NOT_FOUND_MESSAGE "morello-build needs CMake >= 3.23 (FILE_SET); this is ${CMAKE_VERSION}")
  return()
endif()

get_property(_MorelloBuild_done GLOBAL PROPERTY MORELLO_BUILD_CMAKE_DIR SET)
if(NOT _MorelloBuild_done)
  include("${CMAKE_CURRENT_LIST_DIR}/MorelloBuildPython.cmake")
  # <prefix>/lib/pythonX.Y/site-packages/morello_build/cmake (POSIX) or <prefix>/Lib/site-packages/...
  get_filename_component(_MorelloBuild_site "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
  if(_MorelloBuild_site MATCHES "^(.*)/lib/python[0-9.]+/site-packages$")
    set(_MorelloBuild_prefix "${CMAKE_MATCH_1}")
  elseif(_MorelloBuild_site MATCHES "^(.*)/Lib/site-packages$")
    set(_MorelloBuild_prefix "${CMAKE_MATCH_1}")
  else()
    set(_MorelloBuild_prefix "")
  endif()
  # _MorelloBuild_PYTHON_HINT: the interpreter the data-dir config found (<prefix>/bin/python).
  _morello_build_locate("${_MorelloBuild_prefix}" "${CMAKE_CURRENT_LIST_DIR}" "${_MorelloBuild_PYTHON_HINT}")
  unset(_MorelloBuild_site)
  unset(_MorelloBuild_prefix)
  if(NOT _MorelloBuild_located)
    set(MorelloBuild_FOUND FALSE)
    set(MorelloBuild_NOT_FOUND_MESSAGE "${_MorelloBuild_error}")
    return()
  endif()
  # What a generated header depends on: the generator's own code and templates (the files of the
  # generator fingerprint, morello_build/fingerprint.py).
  include("${CMAKE_CURRENT_LIST_DIR}/MorelloBuildGeneratorFiles.cmake")
  _morello_build_generator_files(_MorelloBuild_deps "${_MorelloBuild_package_dir}")
  set_property(GLOBAL PROPERTY MORELLO_BUILD_PYTHON "${_MorelloBuild_python}")
  set_property(GLOBAL PROPERTY MORELLO_BUILD_PACKAGE_DIR "${_MorelloBuild_package_dir}")
  set_property(GLOBAL PROPERTY MORELLO_BUILD_VERSION "${_MorelloBuild_version}")
  set_property(GLOBAL PROPERTY MORELLO_BUILD_ISAS "${_MorelloBuild_isas}")
  set_property(GLOBAL PROPERTY MORELLO_BUILD_GENERATOR_DEPENDS "${_MorelloBuild_deps}")
  set_property(GLOBAL PROPERTY MORELLO_BUILD_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}")
  unset(_MorelloBuild_deps)
  foreach(_MorelloBuild_v IN ITEMS located error python package_dir cmake_dir version isas)
    unset(_MorelloBuild_${_MorelloBuild_v})
  endforeach()
  unset(_MorelloBuild_v)
endif()
unset(_MorelloBuild_done)

get_property(MorelloBuild_PYTHON GLOBAL PROPERTY MORELLO_BUILD_PYTHON)
get_property(MorelloBuild_PACKAGE_DIR GLOBAL PROPERTY MORELLO_BUILD_PACKAGE_DIR)
get_property(MorelloBuild_CMAKE_DIR GLOBAL PROPERTY MORELLO_BUILD_CMAKE_DIR)
get_property(MorelloBuild_ISAS GLOBAL PROPERTY MORELLO_BUILD_ISAS)
get_property(MorelloBuild_VERSION GLOBAL PROPERTY MORELLO_BUILD_VERSION)
set(MorelloBuild_DB "" CACHE STRING
    "Synthesis database for morello_add_kernel() without DB (a path, 'none', or empty: the generator's default)")

include("${CMAKE_CURRENT_LIST_DIR}/MorelloBuildFunctions.cmake")
set(MorelloBuild_FOUND TRUE)
if(NOT MorelloBuild_FIND_QUIETLY)
  get_property(_MorelloBuild_reported GLOBAL PROPERTY MORELLO_BUILD_REPORTED)
  if(NOT _MorelloBuild_reported)
    message(STATUS "Found MorelloBuild ${MorelloBuild_VERSION}: ${MorelloBuild_CMAKE_DIR} (Python: ${MorelloBuild_PYTHON})")
    set_property(GLOBAL PROPERTY MORELLO_BUILD_REPORTED TRUE)
  endif()
  unset(_MorelloBuild_reported)
endif()
