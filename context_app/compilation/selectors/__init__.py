"""Reads for the compile service, one module per concern: the compiler's input (``compile_input``) and the
evidence it is given (``evidence``), stored contexts (``contexts``) and the usage ledger (``usage``).
"""
