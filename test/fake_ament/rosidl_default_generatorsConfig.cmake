# Fake rosidl_default_generators: what rosidl_generator_py does for Python (see README.md).
set(rosidl_default_generators_FOUND TRUE)

macro(rosidl_generate_interfaces target)
  cmake_parse_arguments(_ARG "ADD_LINTER_TESTS;SKIP_INSTALL" "LIBRARY_NAME" "DEPENDENCIES" ${ARGN})
  set(_out "${CMAKE_CURRENT_BINARY_DIR}/rosidl_generator_py/${PROJECT_NAME}")
  file(MAKE_DIRECTORY "${_out}/msg")
  file(WRITE "${_out}/__init__.py" "")
  file(WRITE "${_out}/msg/__init__.py" "")
  foreach(_idl ${_ARG_UNPARSED_ARGUMENTS})
    if(NOT EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${_idl}")
      message(FATAL_ERROR "rosidl_generate_interfaces(): no such interface file '${_idl}'")
    endif()
    get_filename_component(_name "${_idl}" NAME_WE)
    string(REGEX REPLACE "([a-z0-9])([A-Z])" "\\1_\\2" _module "${_name}")
    string(TOLOWER "_${_module}" _module)
    file(WRITE "${_out}/msg/${_module}.py"
      "import importlib\n\n\nclass ${_name}:\n    @staticmethod\n    def typesupport():\n"
      "        return importlib.import_module('.${PROJECT_NAME}_s__rosidl_typesupport_c', package='${PROJECT_NAME}')\n")
    file(APPEND "${_out}/msg/__init__.py" "from ${PROJECT_NAME}.msg.${_module} import ${_name}  # noqa: F401\n")
  endforeach()
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/${PROJECT_NAME}_s__rosidl_typesupport_c.py" "GENERATED = True\n")
  if(NOT _ARG_SKIP_INSTALL)
    ament_python_install_package(${PROJECT_NAME} PACKAGE_DIR "${_out}")
    install(FILES "${CMAKE_CURRENT_BINARY_DIR}/${PROJECT_NAME}_s__rosidl_typesupport_c.py"
      DESTINATION "${PYTHON_INSTALL_DIR}/${PROJECT_NAME}")
  endif()
endmacro()
