from mockmodel.server import main

main()
