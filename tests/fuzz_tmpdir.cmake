# The fuzz replays that need real files (lmdb, coco, tfrecord, zarr) make
# them under $TMPDIR and remove them at exit. Run with -DREPLAYS="a;b"
# (replay executables), -DCORPUS=fuzz/corpus and -DWORK=a scratch dir.
# 1. TMPDIR names a directory that does not exist: a replay that honours
#    TMPDIR fails (mkdtemp there); one writing to /tmp would pass.
# 2. TMPDIR is an empty directory: the replay passes and leaves it empty.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/tmp)
foreach(replay ${REPLAYS})
  get_filename_component(exe ${replay} NAME)
  string(REGEX REPLACE "^fuzz_(.*)_replay$" "\\1" name ${exe})
  execute_process(COMMAND ${CMAKE_COMMAND} -E env TMPDIR=${WORK}/absent
                          ${replay} ${CORPUS}/${name}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "mkdtemp in TMPDIR")
    message(FATAL_ERROR "${exe}: TMPDIR=${WORK}/absent was not used (exit ${rc}): ${err}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env TMPDIR=${WORK}/tmp
                          ${replay} ${CORPUS}/${name}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${exe} with TMPDIR=${WORK}/tmp: exit ${rc}: ${err}")
  endif()
  file(GLOB left ${WORK}/tmp/*)
  if(left)
    message(FATAL_ERROR "${exe} left ${left} in TMPDIR")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
