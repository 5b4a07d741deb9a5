from wasmext_cli.main import main

main(prog_name="wasmext")
