from armarius.cli.main import main

main()
