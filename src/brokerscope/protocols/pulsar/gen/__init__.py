"""Generated protobuf modules (see README.md in this directory); do not edit by hand."""
