/* The modal driver's gRPC module (built as a shared library, stripped), as bytes of the
   executable: module_loader.cpp loads it on first use. SANDBOXER_MODAL_MODULE is its path. */
    .section .rodata.sandboxer_modal_module, "a"
    .balign 64
    .globl sandboxer_modal_module_begin
sandboxer_modal_module_begin:
    .incbin SANDBOXER_MODAL_MODULE
    .globl sandboxer_modal_module_end
sandboxer_modal_module_end:
    .section .note.GNU-stack, "", @progbits
