"""rclpy.exceptions (Humble): the parameter exceptions and their messages."""


class ParameterException(Exception):
    def __init__(self, error_msg, parameters, *args):
        Exception.__init__(self, f"{error_msg}: {parameters}", *args)


class ParameterNotDeclaredException(ParameterException):
    def __init__(self, parameters, *args):
        ParameterException.__init__(self, "Invalid access to undeclared parameter(s)", parameters, *args)


class ParameterAlreadyDeclaredException(ParameterException):
    def __init__(self, parameters, *args):
        ParameterException.__init__(self, "Parameter(s) already declared", parameters, *args)


class InvalidParameterTypeException(ParameterException):
    def __init__(self, desired_parameter, expected_type, *args):
        ParameterException.__init__(
            self,
            f"Trying to set parameter '{desired_parameter.name}' to '{desired_parameter.value}' of type "
            f"'{desired_parameter.type_.name}', expecting type '{expected_type}'",
            desired_parameter.name,
            *args,
        )


class InvalidParameterValueException(ParameterException):
    def __init__(self, parameter, value, reason, *args):
        ParameterException.__init__(
            self, f"Invalid parameter value ({value}) for parameter. Reason: {reason}", parameter, *args
        )


class ParameterImmutableException(ParameterException):
    def __init__(self, parameter, *args):
        ParameterException.__init__(self, "Attempted to modify read-only parameter", parameter, *args)
