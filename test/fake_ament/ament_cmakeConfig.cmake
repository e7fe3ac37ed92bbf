# Fake ament_cmake (see README.md): ament_cmake exports ament_cmake_python, so its macros come along.
include("${CMAKE_CURRENT_LIST_DIR}/ament_cmake_pythonConfig.cmake")
set(ament_cmake_FOUND TRUE)

macro(ament_export_dependencies)
endmacro()

macro(ament_package)
  file(READ "${PROJECT_SOURCE_DIR}/package.xml" _fake_package_xml)
  if(NOT _fake_package_xml MATCHES "<name>${PROJECT_NAME}</name>")
    message(FATAL_ERROR "ament_package(): package.xml does not name ${PROJECT_NAME}")
  endif()
endmacro()
