# Fake ament_cmake_python (see README.md).
if(NOT DEFINED PYTHON_INSTALL_DIR)
  set(PYTHON_INSTALL_DIR "local/lib/python3.10/dist-packages" CACHE INTERNAL "Jammy's answer")
endif()
set(ament_cmake_python_FOUND TRUE)

function(ament_get_python_install_dir out)
  set(${out} "${PYTHON_INSTALL_DIR}" PARENT_SCOPE)
endfunction()

function(ament_python_install_package package_name)
  cmake_parse_arguments(ARG "SKIP_COMPILE" "PACKAGE_DIR;VERSION;SETUP_CFG;DESTINATION;SCRIPTS_DESTINATION" ""
    ${ARGN})
  if(NOT ARG_PACKAGE_DIR)
    set(ARG_PACKAGE_DIR "${CMAKE_CURRENT_LIST_DIR}/${package_name}")
  endif()
  if(NOT EXISTS "${ARG_PACKAGE_DIR}/__init__.py")
    message(FATAL_ERROR "ament_python_install_package() the Python package folder '${ARG_PACKAGE_DIR}' "
      "doesn't contain an '__init__.py' file")
  endif()
  add_custom_target(ament_cmake_python_copy_${package_name}
    COMMAND ${CMAKE_COMMAND} -E copy_directory "${ARG_PACKAGE_DIR}" "${CMAKE_CURRENT_BINARY_DIR}/py/${package_name}")
  install(DIRECTORY "${ARG_PACKAGE_DIR}/" DESTINATION "${PYTHON_INSTALL_DIR}/${package_name}"
    PATTERN "*.pyc" EXCLUDE PATTERN "__pycache__" EXCLUDE)
  if(package_name IN_LIST AMENT_CMAKE_PYTHON_INSTALL_INSTALLED_NAMES)
    message(FATAL_ERROR "ament_python_install_package() a Python module file or package with the same name "
      "'${package_name}' has been installed before")
  endif()
  list(APPEND AMENT_CMAKE_PYTHON_INSTALL_INSTALLED_NAMES "${package_name}")
  set(AMENT_CMAKE_PYTHON_INSTALL_INSTALLED_NAMES "${AMENT_CMAKE_PYTHON_INSTALL_INSTALLED_NAMES}" PARENT_SCOPE)
endfunction()
