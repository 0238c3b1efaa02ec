"""x"""
def main(): print("hi")
