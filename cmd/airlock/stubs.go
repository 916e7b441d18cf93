package main

import "io"

func serveCmd(args []string, stderr io.Writer) int         { return 0 }
func benchCmd(args []string, stdout, stderr io.Writer) int { return 0 }
