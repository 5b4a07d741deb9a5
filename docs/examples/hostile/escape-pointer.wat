;; Returns a pointer far outside its memory: the host refuses to read it.
;; Generated from wasmext.testing.guest_wat; a complete ABI v1 guest.
(module
  
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 65536))
  (data (i32.const 1024) "\82\a5\68\6f\6f\6b\73\91\81\a4\68\6f\6f\6b\a4\74\65\73\74\a4\6e\61\6d\65\a8\77\61\74\2d\74\65\73\74")
  (data (i32.const 4096) "\82\a2\6f\6b\c3\a5\76\61\6c\75\65\a2\6f\6b")
  
  (func (export "wasmext_abi_version") (result i32) (i32.const 1))
  (func $alloc (export "wasmext_alloc") (param $n i32) (result i32) 
        (local $p i32) (local $end i32)
        (local.set $p (global.get $heap))
        (local.set $end (i32.and (i32.add (i32.add (global.get $heap) (local.get $n)) (i32.const 7))
                                 (i32.const -8)))
        (if (i32.gt_u (local.get $end) (i32.mul (memory.size) (i32.const 65536)))
          (then
            (if (i32.eq (memory.grow (i32.sub (i32.add (i32.shr_u (local.get $end) (i32.const 16))
                                                       (i32.const 1))
                                              (memory.size)))
                        (i32.const -1))
              (then (return (i32.const 0))))))
        (global.set $heap (local.get $end))
        (local.get $p))
  (func (export "wasmext_register") (param i32 i32) (result i64)
    (i64.const 4398046511137))
  (func (export "wasmext_call") (param $p i32) (param $l i32) (result i64) (i64.const -4294967280))
  
)
