# Finds the Python interpreter that has morello_build installed, and asks it where the package is.
# Shared by both configs: <prefix>/share/cmake/MorelloBuild/ (installed from the wheel's data dir) and
# the package's own morello_build/cmake/. No include guard: the function is redefined identically.
#
# The data-dir copy is frozen at install time (also for editable installs, whose package files keep
# changing), so the interface between the two configs is kept minimal and stable: the data-dir config
# only finds an interpreter and the package's cmake dir, sets _MorelloBuild_PYTHON_HINT and includes
# <cmake dir>/MorelloBuildConfig.cmake, which queries the interpreter again with its own code.
#
# _morello_build_locate(<prefix> <expected cmake dir> [<preferred python>])   (either dir may be "")
#   Tries, in order: the cache variable MorelloBuild_PYTHON if set (and nothing else), else the
#   preferred python, <prefix>/bin/python3, <prefix>/bin/python, <prefix>/python.exe,
#   <prefix>/Scripts/python.exe, $VIRTUAL_ENV, $CONDA_PREFIX, then python3 and python on PATH. A
#   candidate is accepted when `python -m morello_build.tools.cmake_dir` succeeds (and, given an expected
#   dir, reports that directory).
#   Sets in the caller: _MorelloBuild_located (TRUE/FALSE), _MorelloBuild_error (why not),
#   _MorelloBuild_python, _MorelloBuild_package_dir, _MorelloBuild_cmake_dir, _MorelloBuild_version,
#   _MorelloBuild_isas.
#   The interpreter path is kept as found, never resolved through symlinks: a venv's bin/python is a
#   symlink, and only the unresolved path selects the venv.
function(_morello_build_locate _mbl_PREFIX _mbl_EXPECT_CMAKE_DIR)
  set(_candidates "")
  set(_explicit FALSE)
  if(MorelloBuild_PYTHON)
    set(_explicit TRUE)
    list(APPEND _candidates "${MorelloBuild_PYTHON}")
  else()
    if(ARGC GREATER 2 AND NOT "${ARGV2}" STREQUAL "")
      list(APPEND _candidates "${ARGV2}")
    endif()
    foreach(_root IN ITEMS "${_mbl_PREFIX}" "$ENV{VIRTUAL_ENV}" "$ENV{CONDA_PREFIX}")
      if(_root)
        foreach(_rel IN ITEMS bin/python3 bin/python python.exe Scripts/python.exe)
          if(EXISTS "${_root}/${_rel}" AND NOT IS_DIRECTORY "${_root}/${_rel}")
            list(APPEND _candidates "${_root}/${_rel}")
          endif()
        endforeach()
      endif()
    endforeach()
    foreach(_name IN ITEMS python3 python)
      find_program(_mbl_path_python NAMES ${_name} NO_CACHE NO_PACKAGE_ROOT_PATH NO_CMAKE_PATH
                   NO_CMAKE_ENVIRONMENT_PATH NO_CMAKE_SYSTEM_PATH)
      if(_mbl_path_python)
        list(APPEND _candidates "${_mbl_path_python}")
      endif()
      unset(_mbl_path_python)
    endforeach()
    list(REMOVE_DUPLICATES _candidates)
  endif()

  if(_mbl_EXPECT_CMAKE_DIR)
    file(REAL_PATH "${_mbl_EXPECT_CMAKE_DIR}" _expect)
  endif()
  set(_why "")
  foreach(_py IN LISTS _candidates)
    # Not in the caller's directory: `python -m` puts the working directory first on sys.path, and a
    # morello_build source tree there would shadow the installed package.
    execute_process(
      COMMAND "${_py}" -m morello_build.tools.cmake_dir
      WORKING_DIRECTORY "${CMAKE_BINARY_DIR}"
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
    if(NOT _rc EQUAL 0)
      string(STRIP "${_err}" _err)
      string(REGEX REPLACE ".*\n" "" _err "${_err}")  # the last line: the exception
      string(APPEND _why "\n  ${_py}: cannot run morello_build (${_rc}: ${_err})")
      continue()
    endif()
    set(_info_package_dir "")
    set(_info_cmake_dir "")
    set(_info_version "")
    set(_info_isas "")
    string(REPLACE "\r" "" _out "${_out}")
    string(REPLACE "\n" ";" _lines "${_out}")
    foreach(_line IN LISTS _lines)
      if(_line MATCHES "^([a-z_]+)=(.*)$")
        set(_info_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
      endif()
    endforeach()
    if(NOT _info_cmake_dir OR NOT _info_version)
      string(APPEND _why "\n  ${_py}: unexpected answer from morello_build.tools.cmake_dir: ${_out}")
      continue()
    endif()
    if(_mbl_EXPECT_CMAKE_DIR)
      file(REAL_PATH "${_info_cmake_dir}" _got)
      if(NOT _got STREQUAL _expect)
        string(APPEND _why "\n  ${_py}: imports a different morello_build (${_info_package_dir})")
        continue()
      endif()
    endif()
    set(_MorelloBuild_located TRUE PARENT_SCOPE)
    set(_MorelloBuild_python "${_py}" PARENT_SCOPE)
    set(_MorelloBuild_package_dir "${_info_package_dir}" PARENT_SCOPE)
    set(_MorelloBuild_cmake_dir "${_info_cmake_dir}" PARENT_SCOPE)
    set(_MorelloBuild_version "${_info_version}" PARENT_SCOPE)
    string(REPLACE "," ";" _info_isas "${_info_isas}")
    set(_MorelloBuild_isas "${_info_isas}" PARENT_SCOPE)
    return()
  endforeach()

  if(_explicit)
    set(_hint "MorelloBuild_PYTHON=${MorelloBuild_PYTHON} does not work:${_why}")
  elseif(_candidates)
    set(_hint "no Python interpreter with morello_build installed was found. Tried:${_why}\n"
              "Activate the venv you installed morello-build into, or set -DMorelloBuild_PYTHON=<python>.")
  else()
    set(_hint "no Python interpreter found; set -DMorelloBuild_PYTHON=<python with morello-build installed>.")
  endif()
  string(JOIN "" _hint ${_hint})
  set(_MorelloBuild_located FALSE PARENT_SCOPE)
  set(_MorelloBuild_error "${_hint}" PARENT_SCOPE)
endfunction()
