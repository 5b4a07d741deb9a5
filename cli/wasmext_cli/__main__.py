from wasmext_cli.main import main

main()
