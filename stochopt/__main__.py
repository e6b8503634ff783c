from stochopt.cli import main

main()
