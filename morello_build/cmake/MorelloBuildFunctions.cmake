# morello_add_kernel() and morello_install_kernels(). Loaded by MorelloBuildConfig.cmake, which sets the
# global properties MORELLO_BUILD_{PYTHON,PACKAGE_DIR,CMAKE_DIR,VERSION,ISAS,GENERATOR_DEPENDS}.
#
# morello_add_kernel(<target> SPEC "<spec>"
#                    [NAME <fn>] [NAMESPACE <ns>] [ISA native|avx2|avx2_vnni|avx512|avx512_vnni|avx512_bf16|highway|scalar|dispatch]
#                    [THREADS <n>|native] [PROFILE <file>|<name>] [TUNE <k>] [DB <path>|none] [TEST] [BENCHMARK]
#                    [EXPORT <export-set>] [NO_INSTALL])
#
#   Creates the INTERFACE library <target> (alias morello::<target>) with the header
#   <build>/morello/include/morello/<target>.hpp (#include "morello/<target>.hpp"), synthesized at build
#   time by `<python> -m morello_build synth`. The header is rewritten only when its bytes change, and
#   regenerated only when the spec/options or the generator's own files change.
#   NAME       C++ function name (default: the target name made a C identifier)
#   NAMESPACE  C++ namespace, may be nested a::b (default: morello)
#   ISA        instruction set (default: native, this build machine's best); dispatch: one header with a
#              program per ISA level, the best one the CPU supports chosen at run time (binaries that ship)
#   THREADS    threads the program is synthesized for, 1 to 1024: its parallel loop's tasks are split over
#              them (default: native, the CPUs the generator may run on at build time)
#   PROFILE    cost profile: a file written by `morello-build calibrate` (relative to the current source dir;
#              editing it regenerates the header) or a name: builtin, host, zen3, zen4, zen5, golden-cove,
#              skylake-sp, sunny-cove, sunny-cove-client, generic-avx2 (default: the cache variable MorelloBuild_PROFILE if set, else the generator's:
#              $MORELLO_PROFILE at build time, else host)
#   TUNE       compile and time the k (0 to 64; 0, the default: off) best distinct candidate programs on the
#              build machine and keep the fastest (`synth --tune`); the choice is stored in the DB and reused
#   DB         synthesis database, relative to the current source dir; none (also off, no, 0, false): no DB
#              (default: the cache variable MorelloBuild_DB if set, else the generator's default)
#   TEST       adds the executable <target>_test and the ctest <target>_test: the kernel against
#              <fn>_reference on random data (skipped, return code 77, when <fn>_supported() is false);
#              every parameter (epilogue terms too) through the header's <fn>_param / <fn>_call (C++11;
#              the tolerance is stated in templates/kernel_test.cpp.in)
#   BENCHMARK  adds the Google Benchmark executable <target>_benchmark (GFLOP/s and GB/s counters), calling
#              <fn>_call with every parameter
#   EXPORT     install(TARGETS ... EXPORT <set>) set (default: MorelloKernels); NO_INSTALL: no rules
#   Target properties: MORELLO_SPEC (as given), MORELLO_CANONICAL_SPEC, MORELLO_ISA, MORELLO_THREADS,
#   MORELLO_PROFILE ("" when not given), MORELLO_NAME,
#   MORELLO_NAMESPACE, MORELLO_HEADER ("morello/<target>.hpp"); exported with the target.
#
# morello_install_kernels(<Package> [EXPORT <set>] [NAMESPACE <ns>::] [DESTINATION <dir>] [VERSION <v>])
#   Installs the export set (default MorelloKernels) as <Package>Targets.cmake with a <Package>Config.cmake
#   (and a version file when VERSION or PROJECT_VERSION is set) under DESTINATION (default
#   ${CMAKE_INSTALL_LIBDIR}/cmake/<Package>), and exports it to the build tree too, so that downstream
#   projects can find_package(<Package>) and link <ns>::<target> (default namespace morello::).
include_guard(GLOBAL)
include(GNUInstallDirs)
# CMake >= 3.31: `SPEC ""` sets an empty value (our "SPEC is empty" error) instead of an author warning
# about the caller's policy; functions keep the policies in effect where they are defined (this file).
if(POLICY CMP0174)
  cmake_policy(SET CMP0174 NEW)
endif()

set(_MORELLO_ADD_KERNEL_OPTIONS TEST BENCHMARK NO_INSTALL)
set(_MORELLO_ADD_KERNEL_ONE_VALUE SPEC NAME NAMESPACE ISA THREADS PROFILE TUNE DB EXPORT)
# The cost profiles' names (target/profiles.py names(); tests/test_profile.py checks they agree).
set(_MORELLO_PROFILE_NAMES builtin host zen3 zen4 zen5 golden-cove skylake-sp sunny-cove sunny-cove-client
    generic-avx2)
# C++ reserved words, shared with the Python CLI (codegen.CXX_KEYWORDS): one per line.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/cxx_keywords.txt" _MORELLO_CXX_KEYWORDS)

# Write only when the content changes, so that dependents stay up to date.
function(_morello_write_if_changed path content)
  if(EXISTS "${path}")
    file(READ "${path}" _old)
    if(_old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()

# One quoted argument: the message keeps its semicolons.
macro(_morello_fail msg)
  message(FATAL_ERROR "morello_add_kernel(${_mk_target}): ${msg}")
endmacro()

function(morello_add_kernel)
  get_property(_python GLOBAL PROPERTY MORELLO_BUILD_PYTHON)
  get_property(_cmake_dir GLOBAL PROPERTY MORELLO_BUILD_CMAKE_DIR)
  get_property(_isas GLOBAL PROPERTY MORELLO_BUILD_ISAS)
  get_property(_gen_depends GLOBAL PROPERTY MORELLO_BUILD_GENERATOR_DEPENDS)
  get_property(_version GLOBAL PROPERTY MORELLO_BUILD_VERSION)
  set(_keywords ${_MORELLO_ADD_KERNEL_OPTIONS} ${_MORELLO_ADD_KERNEL_ONE_VALUE})

  # -- arguments -------------------------------------------------------------------------------------
  if(ARGC LESS 1 OR "${ARGV0}" STREQUAL "")
    message(FATAL_ERROR "morello_add_kernel: missing target name: morello_add_kernel(<target> SPEC \"<spec>\" ...)")
  endif()
  set(_mk_target "${ARGV0}")
  if(_mk_target IN_LIST _keywords)
    message(FATAL_ERROR "morello_add_kernel: missing target name before '${_mk_target}': "
                        "morello_add_kernel(<target> SPEC \"<spec>\" ...)")
  endif()
  if(NOT _mk_target MATCHES "^[A-Za-z0-9_.+-]+$")
    _morello_fail("bad target name '${_mk_target}': use letters, digits and _ . + -")
  endif()
  if(NOT _python OR NOT _cmake_dir)
    _morello_fail("MorelloBuild is not loaded: call find_package(MorelloBuild CONFIG REQUIRED) first")
  endif()
  cmake_parse_arguments(PARSE_ARGV 1 _mk "${_MORELLO_ADD_KERNEL_OPTIONS}" "${_MORELLO_ADD_KERNEL_ONE_VALUE}" "")
  if(_mk_UNPARSED_ARGUMENTS)
    list(GET _mk_UNPARSED_ARGUMENTS 0 _bad)
    string(JOIN ", " _accepted ${_keywords})
    _morello_fail("unknown argument '${_bad}' (accepted: ${_accepted}; quote the spec: SPEC \"matmul ...\")")
  endif()
  if(_mk_KEYWORDS_MISSING_VALUES)
    list(GET _mk_KEYWORDS_MISSING_VALUES 0 _bad)
    _morello_fail("${_bad} needs a value")
  endif()
  set(_seen "")
  set(_args "")
  if(ARGC GREATER 1)  # list(SUBLIST ARGV 1 ...) fails on morello_add_kernel(k)
    list(SUBLIST ARGV 1 -1 _args)
  endif()
  foreach(_a IN LISTS _args)
    if(_a IN_LIST _keywords)
      if(_a IN_LIST _seen)
        _morello_fail("${_a} given more than once")
      endif()
      list(APPEND _seen "${_a}")
    endif()
  endforeach()
  foreach(_kw IN ITEMS NAME NAMESPACE ISA PROFILE DB EXPORT)  # given as "" (CMP0174 NEW: defined, empty)
    if(DEFINED _mk_${_kw} AND "${_mk_${_kw}}" STREQUAL "")
      _morello_fail("${_kw} is empty")
    endif()
  endforeach()
  if(NOT DEFINED _mk_SPEC)
    _morello_fail("missing SPEC: morello_add_kernel(${_mk_target} SPEC \"matmul MxKxN ...\")")
  endif()

  if(DEFINED _mk_ISA)
    set(_isa "${_mk_ISA}")
    if(NOT _isa IN_LIST _isas)
      string(JOIN "|" _accepted ${_isas})
      _morello_fail("bad ISA '${_isa}' (accepted: ${_accepted})")
    endif()
  else()
    set(_isa native)
  endif()

  set(_threads native)
  if(DEFINED _mk_THREADS AND NOT _mk_THREADS STREQUAL "native")
    set(_threads "${_mk_THREADS}")
    if(NOT _threads MATCHES "^[1-9][0-9]*$" OR _threads GREATER 1024)
      _morello_fail("THREADS '${_threads}' is not a thread count from 1 to 1024 (or native)")
    endif()
  endif()

  set(_tune 0)
  if(DEFINED _mk_TUNE)
    set(_tune "${_mk_TUNE}")
    if(NOT _tune MATCHES "^[0-9]+$" OR _tune GREATER 64)
      _morello_fail("TUNE '${_tune}' is not a number of candidates from 0 (off) to 64")
    endif()
    if(_tune GREATER 0 AND _isa STREQUAL "dispatch")
      _morello_fail("TUNE measures programs for one ISA; it does not apply to ISA dispatch")
    endif()
  endif()

  if(DEFINED _mk_NAME)
    set(_name "${_mk_NAME}")
    if(NOT _name MATCHES "^[A-Za-z_][A-Za-z0-9_]*$" OR _name IN_LIST _MORELLO_CXX_KEYWORDS)
      _morello_fail("bad NAME '${_name}': not a valid C++ identifier")
    endif()
    if(_name MATCHES "__|^_[A-Z]")  # as codegen.name_problem
      _morello_fail("bad NAME '${_name}': reserved to the C++ implementation ('__', or '_' and a capital)")
    endif()
  else()
    string(MAKE_C_IDENTIFIER "${_mk_target}" _name)
    if(_name IN_LIST _MORELLO_CXX_KEYWORDS)
      string(APPEND _name "_kernel")
    endif()
  endif()

  if(DEFINED _mk_NAMESPACE)
    set(_ns "${_mk_NAMESPACE}")
    string(REPLACE "::" ";" _parts "${_ns}")
    foreach(_p IN LISTS _parts)
      if(NOT _p MATCHES "^[A-Za-z_][A-Za-z0-9_]*$" OR _p IN_LIST _MORELLO_CXX_KEYWORDS)
        _morello_fail("bad NAMESPACE '${_ns}': not a valid C++ namespace (a or a::b)")
      endif()
    endforeach()
    if(_ns MATCHES "^::|::$|::::")
      _morello_fail("bad NAMESPACE '${_ns}': has an empty part (a or a::b)")
    endif()
    if(_ns MATCHES "^(std[0-9]*|posix|_[A-Za-z0-9_]*)(::|$)" OR _ns MATCHES "__|(^|::)_[A-Z]")  # namespace_problem
      _morello_fail("bad NAMESPACE '${_ns}': reserved to the C++ implementation")
    endif()
  else()
    set(_ns morello)
  endif()

  # String tests only: if(_db) would read "off", "no" and "0" as false and silently use the default DB.
  set(_db "")
  if(DEFINED _mk_DB)
    set(_db "${_mk_DB}")
  elseif(DEFINED MorelloBuild_DB)
    set(_db "${MorelloBuild_DB}")
  endif()
  string(TOLOWER "${_db}" _db_lower)
  if(_db_lower MATCHES "^(none|off|no|0|false)$")
    set(_db none)
  elseif(NOT _db STREQUAL "")
    get_filename_component(_db "${_db}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  endif()

  set(_profile "")
  set(_profile_depends "")
  if(DEFINED _mk_PROFILE)
    set(_profile "${_mk_PROFILE}")
  elseif(DEFINED MorelloBuild_PROFILE)
    set(_profile "${MorelloBuild_PROFILE}")
  endif()
  if(NOT _profile STREQUAL "" AND NOT _profile IN_LIST _MORELLO_PROFILE_NAMES)
    get_filename_component(_profile "${_profile}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(NOT EXISTS "${_profile}" OR IS_DIRECTORY "${_profile}")
      string(JOIN "|" _accepted ${_MORELLO_PROFILE_NAMES})
      _morello_fail("PROFILE '${_profile}' is neither a file nor one of ${_accepted}")
    endif()
    set(_profile_depends "${_profile}")
  endif()

  if(TARGET "${_mk_target}")
    _morello_fail("a target named '${_mk_target}' already exists")
  endif()
  foreach(_suffix IN ITEMS _synth _test _benchmark)
    if(TARGET "${_mk_target}${_suffix}")
      _morello_fail("the helper target name '${_mk_target}${_suffix}' is already taken")
    endif()
  endforeach()

  # -- the spec, checked now so that a typo fails configure and not the build -------------------------
  string(STRIP "${_mk_SPEC}" _spec)
  if(_spec STREQUAL "")
    _morello_fail("SPEC is empty")
  endif()
  execute_process(
    COMMAND "${_python}" -m morello_build check-spec "${_spec}"
    WORKING_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}"  # not the caller's directory: see MorelloBuildPython.cmake
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _canonical ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    string(STRIP "${_err}" _err)
    string(REGEX REPLACE "^morello-build: error: " "" _err "${_err}")
    if(_err STREQUAL "")
      set(_err "check-spec exited with ${_rc}")
    endif()
    _morello_fail("bad SPEC \"${_spec}\": ${_err}")
  endif()
  string(STRIP "${_canonical}" _canonical)

  # -- the generator command ------------------------------------------------------------------------
  set(_dir "${CMAKE_CURRENT_BINARY_DIR}/morello")
  set(_include_dir "${_dir}/include")
  set(_header_rel "morello/${_mk_target}.hpp")
  set(_header "${_include_dir}/${_header_rel}")
  set(_stamp "${_dir}/${_mk_target}.stamp")
  set(_args_file "${_dir}/${_mk_target}.args")
  set(_cmd "${_python}" -m morello_build synth "${_spec}" -o "${_header}" --isa "${_isa}" --name "${_name}"
           --namespace "${_ns}")
  if(NOT _threads STREQUAL "native")
    list(APPEND _cmd --threads "${_threads}")
  endif()
  if(NOT _db STREQUAL "")
    list(APPEND _cmd --db "${_db}")
  endif()
  if(NOT _profile STREQUAL "")
    list(APPEND _cmd --profile "${_profile}")
  endif()
  if(_tune GREATER 0)
    list(APPEND _cmd --tune "${_tune}")
  endif()
  # Everything the header depends on besides the generator's files, as a file that changes only when
  # they change: Makefile generators do not notice a changed command line.
  string(JOIN "\n" _args_text "morello-build ${_version}" ${_cmd})
  file(MAKE_DIRECTORY "${_include_dir}/morello")
  _morello_write_if_changed("${_args_file}" "${_args_text}\n")

  add_custom_command(
    OUTPUT "${_stamp}"
    BYPRODUCTS "${_header}"
    COMMAND ${_cmd}
    COMMAND "${CMAKE_COMMAND}" -E touch "${_stamp}"
    DEPENDS ${_gen_depends} "${_args_file}" ${_profile_depends}
    WORKING_DIRECTORY "${_dir}"
    COMMENT "morello: synthesizing ${_mk_target} (${_ns}::${_name}, ISA ${_isa}): ${_spec}"
    VERBATIM)
  add_custom_target(${_mk_target}_synth ALL DEPENDS "${_stamp}")
  set_property(TARGET ${_mk_target}_synth PROPERTY FOLDER morello)

  add_library(${_mk_target} INTERFACE)
  add_library(morello::${_mk_target} ALIAS ${_mk_target})
  target_sources(${_mk_target} INTERFACE FILE_SET HEADERS BASE_DIRS "${_include_dir}" FILES "${_header}")
  add_dependencies(${_mk_target} ${_mk_target}_synth)
  target_compile_features(${_mk_target} INTERFACE cxx_std_11)
  if(NOT TARGET Threads::Threads)
    find_package(Threads REQUIRED)
  endif()
  target_link_libraries(${_mk_target} INTERFACE Threads::Threads)
  if(_isa STREQUAL "highway")
    if(NOT TARGET hwy::hwy)
      find_package(hwy CONFIG QUIET)
    endif()
    if(NOT TARGET hwy::hwy)
      _morello_fail("ISA highway needs Google Highway: find_package(hwy) failed (Debian: apt install libhwy-dev, or set hwy_DIR)")
    endif()
    target_link_libraries(${_mk_target} INTERFACE hwy::hwy)
  endif()
  set_target_properties(${_mk_target} PROPERTIES
    MORELLO_SPEC "${_spec}"
    MORELLO_CANONICAL_SPEC "${_canonical}"
    MORELLO_ISA "${_isa}"
    MORELLO_THREADS "${_threads}"
    MORELLO_PROFILE "${_profile}"
    MORELLO_NAME "${_name}"
    MORELLO_NAMESPACE "${_ns}"
    MORELLO_HEADER "${_header_rel}"
    EXPORT_PROPERTIES
      "MORELLO_SPEC;MORELLO_CANONICAL_SPEC;MORELLO_ISA;MORELLO_THREADS;MORELLO_PROFILE;MORELLO_NAME;MORELLO_NAMESPACE;MORELLO_HEADER")

  if(NOT _mk_NO_INSTALL)
    set(_export MorelloKernels)
    if(DEFINED _mk_EXPORT)
      set(_export "${_mk_EXPORT}")
    endif()
    install(TARGETS ${_mk_target} EXPORT "${_export}"
            FILE_SET HEADERS DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
    if(_isa STREQUAL "highway")
      set_property(GLOBAL APPEND PROPERTY "MORELLO_EXPORT_${_export}_DEPENDENCIES" hwy)
    endif()
  endif()

  # -- TEST and BENCHMARK: sources configured from templates (rewritten only when they change) -------
  set(MORELLO_TARGET "${_mk_target}")
  set(MORELLO_NAME "${_name}")
  set(MORELLO_NAMESPACE "${_ns}")
  set(MORELLO_HEADER "${_header_rel}")
  set(MORELLO_SPEC "${_spec}")
  if(_mk_TEST AND (NOT DEFINED BUILD_TESTING OR BUILD_TESTING))
    configure_file("${_cmake_dir}/templates/kernel_test.cpp.in" "${_dir}/${_mk_target}_test.cpp" @ONLY)
    add_executable(${_mk_target}_test "${_dir}/${_mk_target}_test.cpp")
    target_link_libraries(${_mk_target}_test PRIVATE ${_mk_target})
    set_property(TARGET ${_mk_target}_test PROPERTY FOLDER morello)
    add_test(NAME ${_mk_target}_test COMMAND ${_mk_target}_test)
    set_tests_properties(${_mk_target}_test PROPERTIES SKIP_RETURN_CODE 77 LABELS morello)
  endif()
  if(_mk_BENCHMARK)
    if(NOT TARGET benchmark::benchmark)
      find_package(benchmark CONFIG QUIET)
    endif()
    if(NOT TARGET benchmark::benchmark)
      _morello_fail("BENCHMARK needs Google Benchmark: find_package(benchmark) failed (Debian: apt install libbenchmark-dev, or set benchmark_DIR)")
    endif()
    configure_file("${_cmake_dir}/templates/kernel_benchmark.cpp.in" "${_dir}/${_mk_target}_benchmark.cpp" @ONLY)
    add_executable(${_mk_target}_benchmark "${_dir}/${_mk_target}_benchmark.cpp")
    target_link_libraries(${_mk_target}_benchmark PRIVATE ${_mk_target} benchmark::benchmark)
    set_property(TARGET ${_mk_target}_benchmark PROPERTY FOLDER morello)
  endif()
endfunction()

function(morello_install_kernels)
  if(ARGC LESS 1)
    message(FATAL_ERROR "morello_install_kernels: missing package name: morello_install_kernels(<Package> ...)")
  endif()
  set(_pkg "${ARGV0}")
  cmake_parse_arguments(PARSE_ARGV 1 _mi "" "EXPORT;NAMESPACE;DESTINATION;VERSION" "")
  if(_mi_UNPARSED_ARGUMENTS)
    list(GET _mi_UNPARSED_ARGUMENTS 0 _bad)
    message(FATAL_ERROR "morello_install_kernels(${_pkg}): unknown argument '${_bad}' "
                        "(accepted: EXPORT, NAMESPACE, DESTINATION, VERSION)")
  endif()
  if(_mi_KEYWORDS_MISSING_VALUES)
    list(GET _mi_KEYWORDS_MISSING_VALUES 0 _bad)
    message(FATAL_ERROR "morello_install_kernels(${_pkg}): ${_bad} needs a value")
  endif()
  set(_export MorelloKernels)
  if(_mi_EXPORT)
    set(_export "${_mi_EXPORT}")
  endif()
  set(_ns "morello::")
  if(DEFINED _mi_NAMESPACE)
    set(_ns "${_mi_NAMESPACE}")
  endif()
  set(_dest "${CMAKE_INSTALL_LIBDIR}/cmake/${_pkg}")
  if(_mi_DESTINATION)
    set(_dest "${_mi_DESTINATION}")
  endif()
  set(_version "${PROJECT_VERSION}")
  if(_mi_VERSION)
    set(_version "${_mi_VERSION}")
  endif()

  set(_out "${CMAKE_BINARY_DIR}/morello/packages/${_pkg}")
  install(EXPORT "${_export}" NAMESPACE "${_ns}" DESTINATION "${_dest}" FILE "${_pkg}Targets.cmake")
  export(EXPORT "${_export}" NAMESPACE "${_ns}" FILE "${_out}/${_pkg}Targets.cmake")
  set(_files "${_out}/${_pkg}Config.cmake")
  if(_version)
    include(CMakePackageConfigHelpers)
    write_basic_package_version_file("${_out}/${_pkg}ConfigVersion.cmake" VERSION "${_version}"
                                     COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
    list(APPEND _files "${_out}/${_pkg}ConfigVersion.cmake")
  endif()
  install(FILES ${_files} DESTINATION "${_dest}")
  # The config is written after every directory has been processed, when the export set is complete.
  cmake_language(EVAL CODE "
    cmake_language(DEFER DIRECTORY [[${CMAKE_SOURCE_DIR}]]
                   CALL _morello_write_package_config [[${_pkg}]] [[${_export}]] [[${_out}]])")
endfunction()

function(_morello_write_package_config pkg export out)
  get_property(_deps GLOBAL PROPERTY "MORELLO_EXPORT_${export}_DEPENDENCIES")
  set(_find "find_dependency(Threads)\n")
  if("hwy" IN_LIST _deps)
    string(APPEND _find "find_dependency(hwy CONFIG)\n")
  endif()
  _morello_write_if_changed("${out}/${pkg}Config.cmake"
"# ${pkg}: kernels synthesized by morello-build (morello_install_kernels). Header-only INTERFACE targets.
include(CMakeFindDependencyMacro)
${_find}include(\"\${CMAKE_CURRENT_LIST_DIR}/${pkg}Targets.cmake\")
")
endfunction()
