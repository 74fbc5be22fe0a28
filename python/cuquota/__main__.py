from cuquota._cli import main

main()
