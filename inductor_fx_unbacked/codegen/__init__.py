"""Wrapper codegen additions, laid out like ``torch/_inductor/codegen``."""
