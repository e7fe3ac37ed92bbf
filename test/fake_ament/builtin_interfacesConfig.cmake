set(builtin_interfaces_FOUND TRUE)
