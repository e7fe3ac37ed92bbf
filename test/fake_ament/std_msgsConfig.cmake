set(std_msgs_FOUND TRUE)
