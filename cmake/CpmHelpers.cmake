# Helpers shared by every module's CMakeLists.txt.

# cpm_add_library(name SRCS a.cc b.cc DEPS other_lib ...)
# One static library per module (src/<module>), includes rooted at src/.
function(cpm_add_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# cpm_add_test(name SRCS x_test.cc DEPS libs LABELS unit)
# A GoogleTest executable whose cases ctest discovers one by one.
function(cpm_add_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    CPM_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    CPM_BINARY_DIR="${PROJECT_BINARY_DIR}"
    CPM_PYTHON3="${CPM_PYTHON3}")
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
