# What a generated header depends on, for the DEPENDS of the synthesis commands: every .py file of the
# package and every file under templates/ (any depth), __pycache__ aside. This is the set that
# morello_build/fingerprint.py hashes as the generator fingerprint (the Python API's header cache key);
# tests/test_fingerprint.py checks that the two agree.
function(_morello_build_generator_files out package_dir)
  file(GLOB_RECURSE _py LIST_DIRECTORIES false "${package_dir}/*.py")
  file(GLOB_RECURSE _templates LIST_DIRECTORIES false "${package_dir}/templates/*")
  set(_files ${_py} ${_templates})
  list(FILTER _files EXCLUDE REGEX "/__pycache__/")
  list(REMOVE_DUPLICATES _files)
  list(SORT _files)
  set(${out} "${_files}" PARENT_SCOPE)
endfunction()
