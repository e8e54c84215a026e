int host_function(void) { return 0; }
